import EventLog
/// A table of the read models as the domain names it: a sorted key-value table, some with sorted
/// duplicate values. The store it lives in is not the domain's business: an LMDB store gives each
/// table a ``handle`` of its own (its database), ``InMemoryReadModelStore`` keeps the table's
/// entries at its ``index``. Either way no lookup by name on the hot path.
///
/// A class: every read and write names a table, and a copy of a struct holding the name and the
/// handle (an optional existential) was a retain of each through the runtime's generic copy of an
/// optional, about 3,000 instructions per share action; a reference is one retain.
package final class ReadModelTable: Sendable {
    /// How a table stores its values.
    package struct Flags: OptionSet, Sendable, Hashable {
        package let rawValue: UInt32
        package init(rawValue: UInt32) { self.rawValue = rawValue }

        /// A key holds many values, kept sorted (byte-wise).
        package static let dupSort = Flags(rawValue: 1 << 0)
        /// With ``dupSort``: every value of the table has the same size.
        package static let dupFixed = Flags(rawValue: 1 << 1)
    }

    /// The table's name (the LMDB database's).
    package let name: String
    package let flags: Flags
    /// Its place in ``catalog``.
    package let index: Int
    /// Whether it is derived from the log (rebuilt, compared, kept apart from the log): every table
    /// but the worker's bookkeeping and lease.
    package let derived: Bool
    /// The store's own handle on the table (an LMDB store's database); nil for stores that need
    /// none (``InMemoryReadModelStore``).
    package let handle: (any ReadModelTableHandle)?

    /// The same table with the store's `handle`.
    package func with(handle: any ReadModelTableHandle) -> ReadModelTable {
        ReadModelTable(name: name, flags: flags, index: index, derived: derived, handle: handle)
    }

    private init(name: String, flags: Flags, index: Int, derived: Bool, handle: (any ReadModelTableHandle)?) {
        self.name = name
        self.flags = flags
        self.index = index
        self.derived = derived
        self.handle = handle
    }

    /// Every table of the read models (and the worker's two), in the order of their indexes.
    package static let catalog: [ReadModelTable] = {
        let tables: [(String, Flags, Bool)] = [
            ("rm_users", [], true),
            ("rm_user_lookup", [], true),
            ("rm_zones", [], true),
            ("rm_records", [], true),
            ("rm_record_children", [.dupSort], true),
            ("rm_shares", [], true),
            ("rm_participants", [], true),
            ("rm_shares_by_owner", [], true),
            ("rm_shares_by_user", [], true),
            ("rm_shared_zones", [], true),
            ("rm_outbox", [], true),
            ("rm_verifications", [], true),
            ("rm_counters", [], true),
            ("rm_access", [], true),
            ("rm_one_time_urls", [], true),
            ("rm_addresses", [], true),
            ("idx_share_history", [.dupSort, .dupFixed], true),
            ("idx_user_history", [.dupSort, .dupFixed], true),
            ("idx_container_history", [.dupSort, .dupFixed], true),
            ("idx_history_journal", [], true),
            ("idx_address_journal", [], true),
            ("idx_record_changes", [], true),
            ("idx_zone_changes", [], true),
            ("worker_tasks", [], false),
            ("worker_state", [], false),
        ]
        return tables.enumerated().map { index, table in
            ReadModelTable(name: table.0, flags: table.1, index: index, derived: table.2, handle: nil)
        }
    }()
}

/// A store's own handle on a table (``ReadModelTable/handle``): a class, so that a table stays
/// a few words and the store finds its handle with one load, not a lookup.
package protocol ReadModelTableHandle: AnyObject, Sendable {}

/// How a put stores its value (``ReadModelStore/put(_:key:value:flags:)``).
package struct ReadModelPutFlags: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// The key sorts after every key of the table (a bulk load in key order): the store may append
    /// without searching.
    package static let append = ReadModelPutFlags(rawValue: 1 << 0)
}
