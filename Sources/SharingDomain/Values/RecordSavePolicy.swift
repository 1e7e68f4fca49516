import Foundation

/// How a save treats what the server holds of the record (CloudKit's
/// `CKModifyRecordsOperation.RecordSavePolicy`, with the change-tag check of Web Services'
/// `update` kept apart from the choice of fields).
public enum RecordSavePolicy: Sendable, Hashable {
    /// The record's change tag must be the server's current one (none for a new record, which must
    /// not exist yet); every field is replaced. What `RecordChange.save(_:)` does.
    case ifServerRecordUnchanged
    /// Only the fields named in `keys` change: a named key with a value in the record's fields is
    /// set, a named key without one is removed; fields not named keep their values, and the parent
    /// is kept unless the record names one. With `checkingChangeTag` the record must exist and its
    /// change tag be current (Web Services' `update`); without, the tag is not compared and a missing
    /// record is created (`forceUpdate`, CloudKit's `.changedKeys`).
    case changedKeys(Set<String>, checkingChangeTag: Bool)
    /// Every field is replaced whatever the change tag; a missing record is created (Web Services'
    /// `forceReplace`, CloudKit's `.allKeys`).
    case allKeys
}
