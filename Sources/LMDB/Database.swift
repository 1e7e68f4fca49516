import CLMDB

/// Flags of a named database, fixed when it is created.
package struct DatabaseFlags: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// `MDB_DUPSORT`: a key holds many sorted values.
    package static let dupSort = DatabaseFlags(rawValue: UInt32(MDB_DUPSORT))
    /// `MDB_DUPFIXED`: with `dupSort`, every value of the database has the same size.
    package static let dupFixed = DatabaseFlags(rawValue: UInt32(MDB_DUPFIXED))
}

/// A handle on a named database, valid for the life of its ``Environment``.
///
/// A handle may have a twin (``Environment/openTwins(of:create:)``): a second database of the same
/// flags, `name` with ``twinSuffix``. A transaction that began with the environment's switch set
/// (``Environment/setSwitch(_:key:twinsOpened:)``) reads and writes the twin through this handle; every other
/// transaction the database itself. So a second copy of a set of databases can be filled beside the
/// one in use and put in its place by one committed write of the switch, without any reader seeing
/// a mix. ``Transaction/pinned(_:twin:)`` names one of the two regardless of the switch.
package struct Database: Sendable, Hashable {
    /// The database's name in the environment.
    package let name: String
    @usableFromInline let dbi: MDB_dbi
    /// The twin's handle; `dbi` when the database has no twin.
    @usableFromInline let twinDBI: MDB_dbi
    /// The flags it was opened with.
    package let flags: DatabaseFlags
    /// Whether it lives in the environment's companion (``Environment/attachCompanion(_:)``), not in
    /// the environment itself.
    package let inCompanion: Bool
    /// Whether every value it stores carries a CRC-32C trailer (``RowChecksum``), checked on every
    /// read: a row damaged at rest is an error (``LMDBError/Code/corrupted``), never an answer.
    @usableFromInline let checksummed: Bool

    /// What a twin's name adds to its database's name.
    package static let twinSuffix = "~b"

    init(
        name: String, dbi: MDB_dbi, twinDBI: MDB_dbi? = nil, flags: DatabaseFlags, inCompanion: Bool = false,
        checksummed: Bool = false
    ) {
        self.name = name
        self.dbi = dbi
        self.twinDBI = twinDBI ?? dbi
        self.flags = flags
        self.inCompanion = inCompanion
        // Sorted duplicates of varying sizes are ordered by their bytes, which a trailer would change
        // (a value that is a prefix of another); fixed-size ones keep their order with one.
        self.checksummed = checksummed && (!flags.contains(.dupSort) || flags.contains(.dupFixed))
    }

    /// Whether every value it stores carries a checksum trailer (``RowChecksum``); callers see values
    /// without it.
    package var rowsChecksummed: Bool { checksummed }

    /// Whether the database has a twin (``Environment/openTwins(of:create:)``).
    package var hasTwin: Bool { twinDBI != dbi }

    /// A handle that names a table of a store that is not LMDB (an in-memory stand-in). LMDB
    /// refuses it (`EINVAL`): it belongs to no environment.
    package static func unattached(name: String, flags: DatabaseFlags = []) -> Database {
        Database(name: name, dbi: MDB_dbi.max, flags: flags)
    }
}

/// Flags for a put.
package struct PutFlags: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// `MDB_NOOVERWRITE`: fail with ``LMDBError/Code/keyExists`` when the key exists.
    package static let noOverwrite = PutFlags(rawValue: UInt32(MDB_NOOVERWRITE))
    /// `MDB_NODUPDATA`: (dupsort) fail when the key/value pair exists.
    package static let noDupData = PutFlags(rawValue: UInt32(MDB_NODUPDATA))
    /// `MDB_APPEND`: the key sorts after every key in the database (fast bulk load); else
    /// ``LMDBError/Code/keyExists``.
    package static let append = PutFlags(rawValue: UInt32(MDB_APPEND))
    /// `MDB_APPENDDUP`: (dupsort) the value sorts after every value of its key.
    package static let appendDup = PutFlags(rawValue: UInt32(MDB_APPENDDUP))
}

/// Counters of one database.
package struct DatabaseStatistics: Sendable, Hashable {
    /// Number of entries (key/value pairs; for dupsort databases every value counts).
    package var entries: Int
    /// Depth of the B-tree.
    package var depth: Int
    /// Pages in use: branch + leaf + overflow.
    package var pages: Int
}
