import EventLog
import Foundation

/// A record in a zone (CloudKit's `CKRecord`): a type, typed fields, an optional parent (which puts
/// it into its parent's share hierarchy) and a change tag.
public struct Record: Sendable, Hashable {
    /// The record's id.
    public var recordID: RecordID
    /// The record's type, e.g. `"Note"`.
    public var recordType: String
    /// The fields, by key.
    public var fields: [String: FieldValue]
    /// The parent record (same zone); a record shares the share of its parent chain's root.
    public var parent: RecordID?
    /// The share rooted at this record, if any (set by the ledger, ignored on save).
    public var share: RecordID?
    /// The server's change tag; `nil` for a record never saved. Saving with a tag that is no longer
    /// current fails with ``EventLog/LedgerError/Code/serverRecordChanged``.
    public var recordChangeTag: String?
    /// When the record was first saved (set by the ledger).
    public var creationDate: Date?
    /// When the record was last saved (set by the ledger).
    public var modificationDate: Date?
    /// Who saved the record last (set by the ledger).
    public var lastModifiedUserRecordID: RecordID?
    /// Who created the record (set by the ledger; `nil` for records created before the ledger
    /// recorded creators).
    public var creatorUserRecordID: RecordID?

    /// A new record to save.
    public init(recordType: String, recordID: RecordID, fields: [String: FieldValue] = [:], parent: RecordID? = nil) {
        self.recordType = recordType
        self.recordID = recordID
        self.fields = fields
        self.parent = parent
        self.share = nil
        self.recordChangeTag = nil
        self.creationDate = nil
        self.modificationDate = nil
        self.lastModifiedUserRecordID = nil
        self.creatorUserRecordID = nil
    }

    /// The value of a field, or `nil`.
    public subscript(key: String) -> FieldValue? {
        get { fields[key] }
        set { fields[key] = newValue }
    }
}

/// A typed field value (the value types of CloudKit records that the ledger stores).
public enum FieldValue: Sendable, Hashable {
    /// A string.
    case string(String)
    /// A 64-bit integer.
    case int64(Int64)
    /// A double.
    case double(Double)
    /// A date (stored to the microsecond).
    case date(Date)
    /// Bytes.
    case bytes([UInt8])
    /// A reference to a record in the same zone.
    case reference(RecordID)
    /// A list of values.
    case list([FieldValue])
}

extension FieldValue {
    /// The milliseconds since 1970-01-01 UTC a ``date(_:)`` field may hold: ±8,640,000,000,000,000,
    /// that is ±100,000,000 days, the range of JavaScript's `Date` (what CloudKit JS clients send).
    /// A date outside it is refused with `LedgerError.Code.invalidArguments`.
    public static let dateMillisecondsRange: ClosedRange<Int64> = -8_640_000_000_000_000...8_640_000_000_000_000

    /// ``dateMillisecondsRange`` as dates.
    public static let dateRange: ClosedRange<Date> =
        Date(timeIntervalSince1970: -8_640_000_000_000)...Date(timeIntervalSince1970: 8_640_000_000_000)

    /// What ``dateRange`` allows, in words, for error messages.
    package static let dateRangeText =
        "between -8640000000000000 and 8640000000000000 milliseconds from 1970-01-01 (±100,000,000 days)"

    /// Why this value cannot be stored (a date outside ``dateRange``, in a list too), or `nil`.
    package var unstorableReason: String? {
        switch self {
        case .date(let date):
            // On the seconds, not `dateRange.contains`: Comparable's `<=` is `!(>)`, which a NaN date passes.
            let seconds = date.timeIntervalSince1970
            let bound = FieldValue.dateRange.upperBound.timeIntervalSince1970
            return seconds >= -bound && seconds <= bound ? nil : "a date must be \(FieldValue.dateRangeText)"
        case .list(let values):
            return values.lazy.compactMap(\.unstorableReason).first
        case .string, .int64, .double, .bytes, .reference:
            return nil
        }
    }
}

extension Record {
    /// CloudKit's limit on the size of a record's fields: 1 MB.
    public static let maxFieldBytes = 1_000_000
}
