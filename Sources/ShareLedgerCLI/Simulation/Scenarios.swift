import Foundation
import ShareLedger

/// What a client does next: a small story of one to four calls, chosen by weight. A scenario whose
/// preconditions do not hold in the model (nothing to accept yet, say) does nothing and another is
/// chosen.
enum Scenario: CaseIterable {
    /// Building: zones, records with parent chains, edits (one with a stale change tag), deletions.
    case createZone, createRecord, editRecord, staleRecordEdit, deleteRecord, deleteZone
    /// Sharing a hierarchy, or a zone as a whole.
    case shareHierarchy, shareZone
    /// The owner's (or an administrator's) management.
    case invite, setPermission, removeParticipant, setPublicPermission, staleShareTag, deleteShare
    /// Participants: fetching, accepting, verifying, leaving.
    case fetchMetadata, fetchMetadataBatch, accept, acceptAgain, acceptWithOperations, concurrentAccepts, verify, leave
    /// Participants working with the shared records, and anyone listing their shares.
    case participantEdit, participantDeletes, listShares
    /// Mistakes real clients make (CloudKit sharing reference, §9): URLs and accepts.
    case fetchUnknownURL, fetchWithoutAccount, acceptUninvited, acceptInWrongContainer, wrongAddressVerification
    /// Mistakes real clients make: sharing and managing.
    case inviteToPublicShare, shareAlreadyShared, secondZoneShare, ownerLeaves, notOwnerManages
    /// Mistakes real clients make: participants going too far, stale state.
    case participantDeletesRoot, readNotShared, leaveTwice, acceptDeletedShare
    // access requests and blocked identities (with their intended errors)
    case accessRequest, blockParticipant, oneTimeURL

    /// How often the scenario is chosen, relative to the others.
    var weight: Double {
        switch self {
        case .createZone: return 3
        case .createRecord: return 10
        case .editRecord: return 4
        case .staleRecordEdit: return 1.5
        case .deleteRecord: return 1.2
        case .deleteZone: return 0.3
        case .shareHierarchy: return 5
        case .shareZone: return 1.5
        case .invite: return 11
        case .setPermission: return 3
        case .removeParticipant: return 2.5
        case .setPublicPermission: return 2
        case .staleShareTag: return 1.5
        case .deleteShare: return 1.2
        case .fetchMetadata: return 10
        case .fetchMetadataBatch: return 3
        case .accept: return 9
        case .acceptAgain: return 0.7
        case .verify: return 4
        case .leave: return 2
        case .participantEdit: return 6
        case .listShares: return 1
        case .fetchUnknownURL: return 1.5
        case .fetchWithoutAccount: return 0.3
        case .acceptUninvited: return 1.5
        case .acceptInWrongContainer: return 0.5
        case .wrongAddressVerification: return 0.5
        case .inviteToPublicShare: return 0.5
        case .shareAlreadyShared: return 1.5
        case .secondZoneShare: return 1
        case .ownerLeaves: return 0.3
        case .notOwnerManages: return 0.8
        case .participantDeletesRoot: return 0.5
        case .readNotShared: return 0.5
        case .acceptWithOperations: return 1.5
        case .concurrentAccepts: return 1
        case .participantDeletes: return 1
        case .leaveTwice: return 0.4
        case .acceptDeletedShare: return 0.4
        case .accessRequest: return 2
        case .blockParticipant: return 0.5
        case .oneTimeURL: return 1
        }
    }

    /// The most calls the scenario makes.
    var cost: Int {
        switch self {
        case .concurrentAccepts: return 7
        case .accessRequest: return 6
        case .blockParticipant: return 3
        case .oneTimeURL: return 4
        case .staleRecordEdit, .staleShareTag, .acceptDeletedShare: return 3
        case .verify: return 4
        case .editRecord, .accept, .acceptAgain, .acceptWithOperations, .participantEdit, .acceptUninvited, .acceptInWrongContainer, .listShares:
            return 2
        default: return 1
        }
    }

    private static let table: [(Scenario, Double)] = {
        var total = 0.0
        return allCases.map { scenario in
            total += scenario.weight
            return (scenario, total)
        }
    }()

    /// A scenario chosen by weight.
    static func pick(using rng: inout SeededGenerator) -> Scenario {
        let x = Double.random(in: 0..<table.last!.1, using: &rng)
        return table.first { x < $0.1 }?.0 ?? .createRecord
    }

    /// What to do when nothing chosen could run: build something.
    static func fallback(_ model: PartitionModel) -> Scenario {
        model.liveZones.isEmpty ? .createZone : .createRecord
    }
}

extension SimulationClient {
    /// Runs a scenario; false when its preconditions do not hold (no call was made).
    mutating func perform(_ scenario: Scenario) async -> Bool {
        switch scenario {
        case .createZone: return await createZone()
        case .createRecord: return await createRecord()
        case .editRecord: return await editRecord(stale: false)
        case .staleRecordEdit: return await editRecord(stale: true)
        case .deleteRecord: return await deleteRecord()
        case .deleteZone: return await deleteZone()
        case .shareHierarchy: return await shareHierarchy()
        case .shareZone: return await shareZone()
        case .invite: return await invite()
        case .setPermission: return await setPermission()
        case .removeParticipant: return await removeParticipant()
        case .setPublicPermission: return await setPublicPermission()
        case .staleShareTag: return await staleShareTag()
        case .deleteShare: return await deleteShare()
        case .fetchMetadata: return await fetchMetadata()
        case .fetchMetadataBatch: return await fetchMetadataBatch()
        case .accept: return await accept()
        case .acceptAgain: return await acceptAgain()
        case .verify: return await verify()
        case .leave: return await leave()
        case .participantEdit: return await participantEdit()
        case .listShares: return await listShares()
        case .fetchUnknownURL: return await fetchUnknownURL()
        case .fetchWithoutAccount: return await fetchWithoutAccount()
        case .acceptUninvited: return await acceptUninvited()
        case .acceptInWrongContainer: return await acceptInWrongContainer()
        case .wrongAddressVerification: return await wrongAddressVerification()
        case .inviteToPublicShare: return await inviteToPublicShare()
        case .shareAlreadyShared: return await shareAlreadyShared()
        case .secondZoneShare: return await secondZoneShare()
        case .ownerLeaves: return await ownerLeaves()
        case .notOwnerManages: return await notOwnerManages()
        case .participantDeletesRoot: return await participantDeletesRoot()
        case .readNotShared: return await readNotShared()
        case .acceptWithOperations: return await acceptWithOperations()
        case .concurrentAccepts: return await concurrentAccepts()
        case .participantDeletes: return await participantDeletes()
        case .leaveTwice: return await leaveTwice()
        case .acceptDeletedShare: return await acceptDeletedShare()
        case .accessRequest: return await accessRequest()
        case .blockParticipant: return await blockParticipant()
        case .oneTimeURL: return await oneTimeURL()
        }
    }

    // MARK: - Building

    private mutating func createZone() async -> Bool {
        let owner = Int.random(in: 0..<model.people.count, using: &rng)
        let zoneName = ["Notes", "Trips", "Lists", "Photos", "Recipes"].randomElement(using: &rng)! + "-\(model.nextSerial())"
        let handle = as_(owner)
        guard
            let zone = await call("saveZone", .success, "create zone \(zoneName)", { () async throws(LedgerError) in
                try await handle.save(RecordZone(zoneID: RecordZoneID(zoneName: zoneName)))
            })
        else { return true }
        if zone.zoneID.ownerName != name(owner) { mismatch("zone \(zoneName) came back owned by \(zone.zoneID.ownerName)") }
        model.zones.append(SimZone(owner: owner, name: zoneName))
        return true
    }

    private mutating func createRecord() async -> Bool {
        guard let zone = model.liveZones.randomElement(using: &rng) else { return false }
        let recordName = "r\(model.nextSerial())"
        // Most records hang below another one: parent chains, the hierarchies shares are made of.
        let parent = rng.chance(0.6) ? model.zones[zone].records.randomElement(using: &rng)?.name : nil
        var record = Record(
            recordType: parent == nil ? "List" : "Item", recordID: recordID(recordName, zone: zone),
            fields: ["title": .string("item \(recordName)"), "rank": .int64(Int64(model.serial))])
        if let parent { record.parent = recordID(parent, zone: zone) }
        let handle = as_(model.zones[zone].owner)
        if await call("saveRecord", .success, "create record \(recordName)", { () async throws(LedgerError) in
            try await handle.save(record)
        }) != nil {
            model.zones[zone].records.append(SimRecord(name: recordName, parent: parent))
        }
        return true
    }

    /// The owner fetches a record, changes it and saves it; with `stale`, then saves the copy it
    /// fetched first again (a lost update that the change tag catches).
    private mutating func editRecord(stale: Bool) async -> Bool {
        let zones = model.liveZones.filter { !model.zones[$0].records.isEmpty }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let record = model.zones[zone].records.randomElement(using: &rng)!.name
        let handle = as_(model.zones[zone].owner)
        let id = recordID(record, zone: zone)
        guard let fetched = await call("fetchRecord", .success, "fetch own record \(record)", { () throws(LedgerError) in
            try handle.record(for: id)
        }) else { return true }
        var changed = fetched
        changed["note"] = .string("edited \(model.nextSerial())")
        _ = await call("saveRecord", .success, "save own record \(record)") { () async throws(LedgerError) in
            try await handle.save(changed)
        }
        if stale {
            var lost = fetched
            lost["note"] = .string("lost update")
            _ = await call("saveRecord", .failure(.serverRecordChanged), "save \(record) with a stale change tag") {
                () async throws(LedgerError) in try await handle.save(lost)
            }
        }
        return true
    }

    /// The owner deletes a record with no children; deleting a share's root deletes the share.
    private mutating func deleteRecord() async -> Bool {
        let candidates = model.liveZones.flatMap { zone in
            model.zones[zone].records.filter { !model.zones[zone].hasChildren($0.name) }.map { (zone, $0.name) }
        }
        guard let (zone, record) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(model.zones[zone].owner)
        let id = recordID(record, zone: zone)
        guard await call("deleteRecord", .success, "delete record \(record)", { () async throws(LedgerError) in
            try await handle.deleteRecord(withID: id)
        }) != nil else { return true }
        model.zones[zone].records.removeAll { $0.name == record }
        if let share = model.zones[zone].share, model.shares[share].root == record { model.killShare(share) }
        return true
    }

    private mutating func deleteZone() async -> Bool {
        // Keep most zones: deleting one with many records throws away the work of the run.
        guard model.liveZones.count > 4, let zone = model.liveZones.randomElement(using: &rng) else { return false }
        let handle = as_(model.zones[zone].owner)
        let zoneID = RecordZoneID(zoneName: model.zones[zone].name)
        guard await call("deleteRecordZone", .success, "delete zone \(zoneID.zoneName)", { () async throws(LedgerError) in
            try await handle.deleteRecordZone(withID: zoneID)
        }) != nil else { return true }
        if let share = model.zones[zone].share { model.killShare(share) }
        model.zones[zone].live = false
        model.zones[zone].records = []
        return true
    }

    private mutating func randomPublicPermission() -> Permission {
        let x = Double.random(in: 0..<1, using: &rng)
        return x < 0.75 ? .none : x < 0.9 ? .readOnly : .readWrite
    }

    private mutating func shareHierarchy() async -> Bool {
        let zones = model.liveZones.filter { model.zones[$0].share == nil && !model.zones[$0].records.isEmpty }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let root = model.zones[zone].records.randomElement(using: &rng)!.name
        let permission = randomPublicPermission()
        let title = ["Groceries", "Road trip", "Book club", "Nora's log", "Garden"].randomElement(using: &rng)!
        let handle = as_(model.zones[zone].owner)
        let id = recordID(root, zone: zone)
        guard let share = await call("shareRecord", .success, "share record \(root)", { () async throws(LedgerError) in
            try await handle.share(rootRecord: id, title: title, publicPermission: permission)
        }) else { return true }
        if share.hierarchicalRootRecordID?.recordName != root || share.publicPermission != permission {
            mismatch("the share of \(root) came back with root \(String(describing: share.hierarchicalRootRecordID)), public \(share.publicPermission)")
        }
        _ = model.addShare(
            SimShare(
                token: share.token.text, url: share.url, owner: model.zones[zone].owner, zone: zone, root: root,
                publicPermission: permission, title: title))
        return true
    }

    private mutating func shareZone() async -> Bool {
        let zones = model.liveZones.filter { model.zones[$0].share == nil }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let permission = randomPublicPermission()
        let handle = as_(model.zones[zone].owner)
        let zoneID = RecordZoneID(zoneName: model.zones[zone].name)
        guard let share = await call("shareZone", .success, "share zone \(zoneID.zoneName)", { () async throws(LedgerError) in
            try await handle.share(recordZoneID: zoneID, title: "Everything in \(zoneID.zoneName)", publicPermission: permission)
        }) else { return true }
        if !share.isZoneWide { mismatch("the zone-wide share of \(zoneID.zoneName) is not zone-wide") }
        _ = model.addShare(
            SimShare(
                token: share.token.text, url: share.url, owner: model.zones[zone].owner, zone: zone, root: nil,
                publicPermission: permission, title: share.title ?? ""))
        return true
    }

    // MARK: - Management

    /// The owner or an administrator invites someone of the partition, by account, email, phone, or
    /// an address no account has (which the invitee later verifies).
    private mutating func invite() async -> Bool {
        guard let shareIndex = pickShare({ !$0.isPublic }) else { return false }
        let inviter = manager(of: shareIndex)
        let share = model.shares[shareIndex]
        let candidates = model.people.indices.filter { $0 != share.owner && $0 != inviter }
        guard let person = candidates.randomElement(using: &rng) else { return false }
        let user = model.people[person]
        let existing = share.entryIndex(of: person)
        // Invariant: one entry per person and share. An existing entry is invited again the way the
        // ledger finds it: by account once matched, by its address while not.
        let kind: LookupKind
        if let existing {
            kind = share.entries[existing].claimed ? .account : .alias
        } else {
            var kinds: [(LookupKind, Double)] = [(.account, 0.35), (.alias, 0.25)]
            if user.email != nil { kinds.append((.email, 0.25)) }
            if user.phone != nil { kinds.append((.phone, 0.15)) }
            let total = kinds.reduce(0) { $0 + $1.1 }
            var x = Double.random(in: 0..<total, using: &rng)
            var chosen = LookupKind.account
            for (candidate, weight) in kinds {
                if x < weight {
                    chosen = candidate
                    break
                }
                x -= weight
            }
            kind = chosen
        }
        let lookup: LookupInfo
        switch kind {
        case .account: lookup = LookupInfo(userRecordID: RecordID(userRecordName: user.name))
        case .email: lookup = LookupInfo(emailAddress: rng.chance(0.2) ? user.email!.uppercased() : user.email!)
        case .phone: lookup = LookupInfo(phoneNumber: user.phone!)
        case .alias: lookup = LookupInfo(emailAddress: user.alias)
        }
        let role: Role = rng.chance(0.12) ? .administrator : .privateUser
        let permission: Permission = rng.chance(0.5) ? .readWrite : .readOnly
        let handle = as_(inviter)
        let url = share.url
        guard let result = await call("addParticipant", .success, "invite \(user.name) by \(lookup) to \(share.token)", {
            () async throws(LedgerError) in
            try await handle.addParticipant(lookup, permission: permission, role: role, to: url)
        }) else { return true }
        guard let entry = participant(in: result, for: person, kind: kind) else {
            mismatch("\(user.name), invited by \(lookup), is not among the participants of \(share.token)")
            return true
        }
        if let existing {
            let before = model.shares[shareIndex].entries[existing]
            if entry.participantID != before.participantID {
                mismatch("inviting \(user.name) again gave a new participant id")
            }
            var updated = before
            updated.role = role
            updated.permission = permission
            if before.status == .removed { updated.status = .pending }
            model.shares[shareIndex].entries[existing] = updated
        } else {
            model.shares[shareIndex].entries.append(
                SimEntry(
                    person: person, participantID: entry.participantID, kind: kind, claimed: kind != .alias, status: .pending,
                    role: role, permission: permission))
        }
        let expected = model.shares[shareIndex].entries[model.shares[shareIndex].entryIndex(of: person)!]
        if entry.acceptanceStatus != expected.status || entry.role != role || entry.permission != permission
            || entry.userIdentity.hasiCloudAccount != expected.claimed
        {
            mismatch(
                "after inviting \(user.name): \(entry.role) \(entry.acceptanceStatus) \(entry.permission) account \(entry.userIdentity.hasiCloudAccount), "
                    + "expected \(role) \(expected.status) \(permission) account \(expected.claimed)")
        }
        return true
    }

    private mutating func setPermission() async -> Bool {
        guard
            let shareIndex = pickShare({ share in
                share.entries.contains { $0.status != .removed && ($0.role == .privateUser || $0.role == .administrator) }
            })
        else { return false }
        let manager = manager(of: shareIndex)
        let targets = model.shares[shareIndex].entries.indices.filter { index in
            let entry = model.shares[shareIndex].entries[index]
            return entry.status != .removed && (entry.role == .privateUser || entry.role == .administrator) && entry.person != manager
        }
        guard let target = targets.randomElement(using: &rng) else { return false }
        let entry = model.shares[shareIndex].entries[target]
        let permission: Permission = entry.permission == .readOnly ? .readWrite : .readOnly
        let role: Role? = rng.chance(0.2) ? (entry.role == .administrator ? .privateUser : .administrator) : nil
        let handle = as_(manager)
        let url = model.shares[shareIndex].url
        guard let result = await call("setPermission", .success, "set \(permission) for \(entry.participantID)", {
            () async throws(LedgerError) in
            try await handle.setPermission(permission, role: role, forParticipant: entry.participantID, in: url)
        }) else { return true }
        model.shares[shareIndex].entries[target].permission = permission
        if let role { model.shares[shareIndex].entries[target].role = role }
        let shown = result.participants.first { $0.participantID == entry.participantID }
        if shown?.permission != permission || shown?.role != model.shares[shareIndex].entries[target].role {
            mismatch("setPermission of \(entry.participantID): the share shows \(String(describing: shown?.permission))")
        }
        return true
    }

    private mutating func removeParticipant() async -> Bool {
        guard let shareIndex = pickShare({ share in share.entries.contains { $0.status != .removed } }) else { return false }
        let manager = manager(of: shareIndex)
        let targets = model.shares[shareIndex].entries.indices.filter {
            model.shares[shareIndex].entries[$0].status != .removed && model.shares[shareIndex].entries[$0].person != manager
        }
        guard let target = targets.randomElement(using: &rng) else { return false }
        let entry = model.shares[shareIndex].entries[target]
        let handle = as_(manager)
        let url = model.shares[shareIndex].url
        guard await call("removeParticipant", .success, "remove \(entry.participantID)", { () async throws(LedgerError) in
            try await handle.removeParticipant(entry.participantID, from: url)
        }) != nil else { return true }
        model.shares[shareIndex].entries[target].status = .removed
        return true
    }

    private mutating func setPublicPermission() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let current = model.shares[shareIndex].publicPermission
        let permission = [Permission.none, .readOnly, .readWrite].filter { $0 != current }.randomElement(using: &rng)!
        let handle = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        guard let result = await call("setPublicPermission", .success, "make \(url) \(permission)", {
            () async throws(LedgerError) in try await handle.setPublicPermission(permission, for: url)
        }) else { return true }
        model.changePublicPermission(shareIndex, to: permission)
        if result.publicPermission != permission { mismatch("setPublicPermission answered \(result.publicPermission)") }
        return true
    }

    /// The owner reads the share, changes its title with the change tag it read (fine), then makes
    /// a second change with the same, now stale, tag (SyncKit #49: `serverRecordChanged`).
    private mutating func staleShareTag() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let handle = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        guard let read = await call("fetchShare", .success, "read share \(url)", { () throws(LedgerError) in
            try handle.share(for: url)
        }) else { return true }
        let tag = read.recordChangeTag
        let title = "Renamed \(model.nextSerial())"
        guard await call("setTitle", .success, "retitle with the current tag", { () async throws(LedgerError) in
            try await handle.setTitle(title, for: url, ifChangeTag: tag)
        }) != nil else { return true }
        model.shares[shareIndex].title = title
        _ = await call("setTitle", .failure(.serverRecordChanged), "retitle with a stale tag") { () async throws(LedgerError) in
            try await handle.setTitle("Lost \(title)", for: url, ifChangeTag: tag)
        }
        return true
    }

    private mutating func deleteShare() async -> Bool {
        // Shares with accepted participants are kept more often: deleting them is the rarer event.
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let handle = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        guard await call("deleteShare", .success, "delete share \(url)", { () async throws(LedgerError) in
            try await handle.deleteShare(url)
        }) != nil else { return true }
        model.killShare(shareIndex)
        return true
    }

    // MARK: - Participants

    /// Someone fetches a share's metadata: a participant, the owner, or anyone of the partition.
    private mutating func fetchMetadata() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let share = model.shares[shareIndex]
        let person: Int
        let x = Double.random(in: 0..<1, using: &rng)
        if x < 0.5, let entry = share.entries.randomElement(using: &rng) {
            person = entry.person
        } else if x < 0.65 {
            person = share.owner
        } else {
            person = Int.random(in: 0..<model.people.count, using: &rng)
        }
        let fetchRoot = rng.chance(0.5)
        let keys: [String]? = [nil, ["title"], []].randomElement(using: &rng)!
        let handle = as_(person)
        let url = share.url
        let result = await call("shareMetadata", model.standing(shareIndex, person: person).intent, "\(name(person)) fetches \(url)") { () async throws(LedgerError) in
            try await handle.shareMetadatas(for: [url], shouldFetchRootRecord: fetchRoot, rootRecordDesiredKeys: keys)[url]!.get()
        }
        if let result { check(result, shareIndex: shareIndex, person: person, fetchRoot: fetchRoot, keys: keys) }
        return true
    }

    /// Compares fetched metadata with the model.
    private mutating func check(_ metadata: Share.Metadata, shareIndex: Int, person: Int, fetchRoot: Bool, keys: [String]?) {
        guard case .member(let role, let status, let permission) = model.standing(shareIndex, person: person) else { return }
        let share = model.shares[shareIndex]
        if metadata.participantRole != role || metadata.participantStatus != status || metadata.participantPermission != permission {
            mismatch(
                "\(name(person))'s metadata of \(share.token): \(metadata.participantRole) \(metadata.participantStatus) "
                    + "\(metadata.participantPermission), expected \(role) \(status) \(permission)")
        }
        if metadata.containerIdentifier != home || metadata.ownerIdentity.userRecordID?.recordName != name(share.owner) {
            mismatch("metadata of \(share.token): container \(metadata.containerIdentifier), owner \(String(describing: metadata.ownerIdentity.userRecordID))")
        }
        if metadata.hierarchicalRootRecordID?.recordName != share.root {
            mismatch("metadata of \(share.token): root \(String(describing: metadata.hierarchicalRootRecordID)), expected \(String(describing: share.root))")
        }
        let wantsRoot = fetchRoot && share.root != nil
        if (metadata.rootRecord != nil) != wantsRoot {
            mismatch("metadata of \(share.token): root record \(metadata.rootRecord == nil ? "missing" : "present"), fetchRoot \(fetchRoot)")
        } else if let root = metadata.rootRecord, let keys, !Set(root.fields.keys).isSubset(of: Set(keys)) {
            mismatch("metadata of \(share.token): root record fields \(root.fields.keys.sorted()) beyond the desired \(keys)")
        }
    }

    /// One user fetches several URLs at once (CKFetchShareMetadataOperation): shares of the
    /// partition, and now and then an unknown, a deleted or a malformed URL.
    private mutating func fetchMetadataBatch() async -> Bool {
        let live = model.liveShares
        guard !live.isEmpty else { return false }
        let person = Int.random(in: 0..<model.people.count, using: &rng)
        // Each URL with the share it names, or nil for one that must fail with unknownItem.
        var expectations: [(URL, Int?)] = []
        for _ in 0..<Int.random(in: 2...6, using: &rng) {
            let shareIndex = live.randomElement(using: &rng)!
            let url = model.shares[shareIndex].url
            guard !expectations.contains(where: { $0.0 == url }) else { continue }
            expectations.append((url, shareIndex))
        }
        if rng.chance(0.5) { expectations.append((unknownURL(), nil)) }
        if rng.chance(0.3), let dead = model.deadURLs.randomElement(using: &rng) {
            expectations.append((dead, nil))
        }
        if rng.chance(0.2) {
            expectations.append((URL(string: "https://share.localhost/share/not-a-token-\(model.nextSerial())")!, nil))
        }
        let handle = as_(person)
        let urls = expectations.map(\.0)
        let fetchRoot = rng.chance(0.5)
        guard let results = await call("shareMetadatas", .success, "\(name(person)) fetches \(urls.count) URLs", {
            () async throws(LedgerError) in try await handle.shareMetadatas(for: urls, shouldFetchRootRecord: fetchRoot)
        }) else { return true }
        if results.count != urls.count { mismatch("a fetch of \(urls.count) URLs gave \(results.count) results") }
        for (url, expectation) in expectations {
            guard let result = results[url] else { continue }
            let what = "\(name(person)) fetches \(url) in a batch"
            if let shareIndex = expectation {
                if let metadata = judge("shareMetadatas", model.standing(shareIndex, person: person).intent, result, what) {
                    check(metadata, shareIndex: shareIndex, person: person, fetchRoot: fetchRoot, keys: nil)
                }
            } else {
                _ = judge("shareMetadatas", .failure(.unknownItem), result, what)
            }
        }
        return true
    }

    /// An invitee fetches the metadata and accepts; or anyone joins a public share.
    private mutating func accept() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            let share = model.shares[shareIndex]
            for person in model.people.indices where person != share.owner {
                let entry = share.entryIndex(of: person).map { share.entries[$0] }
                if let entry, entry.claimed, entry.status == .pending {
                    candidates.append((shareIndex, person))
                } else if share.isPublic, entry == nil || (entry!.claimed && entry!.status == .removed) {
                    // Joining as a public user (an unmatched invitation of the same person would
                    // make a second entry, which the workload's model does not follow).
                    candidates.append((shareIndex, person))
                }
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let url = model.shares[shareIndex].url
        guard let metadata = await call("shareMetadata", .success, "\(name(person)) fetches \(url) to accept it", {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }) else { return true }
        check(metadata, shareIndex: shareIndex, person: person, fetchRoot: false, keys: nil)
        guard let accepted = await call("accept", .success, "\(name(person)) accepts \(url)", { () async throws(LedgerError) in
            try await handle.accept(metadata)
        }) else { return true }
        guard let me = accepted.currentUserParticipant, me.acceptanceStatus == .accepted else {
            mismatch("\(name(person)) accepted \(url) but is not an accepted participant of the answer")
            return true
        }
        let share = model.shares[shareIndex]
        if let existing = share.entryIndex(of: person) {
            var entry = share.entries[existing]
            if me.participantID != entry.participantID { mismatch("accepting \(url) gave \(name(person)) a new participant id") }
            if entry.status == .removed {
                entry.role = .publicUser
                entry.permission = share.publicPermission
                entry.kind = .account
            }
            entry.status = .accepted
            model.shares[shareIndex].entries[existing] = entry
        } else {
            model.shares[shareIndex].entries.append(
                SimEntry(
                    person: person, participantID: me.participantID, kind: .account, claimed: true, status: .accepted,
                    role: .publicUser, permission: share.publicPermission))
        }
        let entry = model.shares[shareIndex].entries[model.shares[shareIndex].entryIndex(of: person)!]
        if me.role != entry.role || me.permission != entry.permission {
            mismatch("\(name(person)) accepted \(url) as \(me.role) \(me.permission), expected \(entry.role) \(entry.permission)")
        }
        return true
    }

    /// An accepted participant accepts again (a retry after a lost answer): success, nothing changes.
    private mutating func acceptAgain() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .accepted {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let url = model.shares[shareIndex].url
        guard let metadata = await call("shareMetadata", .success, "\(name(person)) fetches \(url) again", {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }) else { return true }
        check(metadata, shareIndex: shareIndex, person: person, fetchRoot: false, keys: nil)
        _ = await call("accept", .success, "\(name(person)) accepts \(url) again") { () async throws(LedgerError) in
            try await handle.accept(metadata)
        }
        return true
    }

    /// The invitee of an invitation to an address no account has: the fetch says verification may
    /// be needed; the user asks for a code, sometimes types it wrong, then proves the address.
    private mutating func verify() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where !entry.claimed && entry.status == .pending {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let share = model.shares[shareIndex]
        let url = share.url
        let entry = share.entries[share.entryIndex(of: person)!]
        _ = await call(
            "shareMetadata", model.standing(shareIndex, person: person).intent, "\(name(person)) fetches \(url) before verifying"
        ) { () async throws(LedgerError) in try await handle.shareMetadata(for: url) }
        let alias = model.people[person].alias
        guard let verification = await call("requestParticipantVerification", .success, "\(name(person)) asks to verify \(PersonalData.redact(alias, as: .emailAddress))", {
            () async throws(LedgerError) in
            try await handle.requestParticipantVerification(for: url, lookupInfo: LookupInfo(emailAddress: alias))
        }) else { return true }
        if verification.participantID != entry.participantID {
            mismatch("verification of \(PersonalData.redact(alias, as: .emailAddress)) names participant \(verification.participantID), expected \(entry.participantID)")
        }
        if rng.chance(0.25) {
            _ = await call("verifyParticipant", .failure(.permissionFailure), "\(name(person)) types a wrong code") {
                () async throws(LedgerError) in try await handle.verifyParticipant(for: url, code: "0000000000WRONGCODE0000000")
            }
        }
        let code = rng.chance(0.3) ? verification.code.lowercased() : verification.code
        guard let verified = await call("verifyParticipant", .success, "\(name(person)) verifies \(PersonalData.redact(alias, as: .emailAddress))", {
            () async throws(LedgerError) in try await handle.verifyParticipant(for: url, code: code)
        }) else { return true }
        let index = model.shares[shareIndex].entryIndex(of: person)!
        model.shares[shareIndex].entries[index].claimed = true
        if verified.currentUserParticipant?.participantID != entry.participantID {
            mismatch("after verifying, \(name(person)) is not participant \(entry.participantID) of \(url)")
        }
        return true
    }

    private mutating func leave() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status != .removed {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let url = model.shares[shareIndex].url
        guard await call("leaveShare", .success, "\(name(person)) leaves \(url)", { () async throws(LedgerError) in
            try await handle.leaveShare(url)
        }) != nil else { return true }
        let index = model.shares[shareIndex].entryIndex(of: person)!
        model.shares[shareIndex].entries[index].status = .removed
        return true
    }

    /// An accepted participant changes a shared record, or adds one below it: fine with read-write
    /// permission, refused with read-only.
    private mutating func participantEdit() async -> Bool {
        var candidates: [(Int, SimEntry)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .accepted {
                candidates.append((shareIndex, entry))
            }
        }
        guard let (shareIndex, entry) = candidates.randomElement(using: &rng),
            let record = model.covered(shareIndex).randomElement(using: &rng)
        else { return false }
        let zone = model.shares[shareIndex].zone
        let handle = as_(entry.person)
        let id = recordID(record, zone: zone)
        let intent: Intent = entry.permission == .readWrite ? .success : .failure(.permissionFailure)
        if rng.chance(0.3) {
            let newName = "r\(model.nextSerial())"
            // In a zone shared as a whole a new record needs no parent.
            let parent: String? = model.shares[shareIndex].root == nil && rng.chance(0.5) ? nil : record
            let new = Record(
                recordType: "Item", recordID: recordID(newName, zone: zone), fields: ["title": .string("added by \(name(entry.person))")],
                parent: parent.map { recordID($0, zone: zone) })
            if await call("saveRecord", intent, "\(name(entry.person)) adds \(newName) below shared \(parent ?? "nothing")", {
                () async throws(LedgerError) in try await handle.save(new)
            }) != nil {
                model.zones[zone].records.append(SimRecord(name: newName, parent: parent))
            }
            return true
        }
        guard var fetched = await call("fetchRecord", .success, "\(name(entry.person)) reads shared \(record)", {
            () throws(LedgerError) in try handle.record(for: id)
        }) else { return true }
        fetched["note"] = .string("changed by \(name(entry.person))")
        let changed = fetched
        _ = await call("saveRecord", intent, "\(name(entry.person)) (\(entry.permission)) saves shared \(record)") {
            () async throws(LedgerError) in try await handle.save(changed)
        }
        return true
    }

    /// An accepted participant deletes a shared record with nothing below it (not the root):
    /// fine with read-write permission, refused with read-only.
    private mutating func participantDeletes() async -> Bool {
        var candidates: [(Int, SimEntry)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .accepted {
                candidates.append((shareIndex, entry))
            }
        }
        guard let (shareIndex, entry) = candidates.randomElement(using: &rng) else { return false }
        let share = model.shares[shareIndex]
        let zone = share.zone
        let leaves = model.covered(shareIndex).filter { $0 != share.root && !model.zones[zone].hasChildren($0) }
        guard let record = leaves.randomElement(using: &rng) else { return false }
        let handle = as_(entry.person)
        let id = recordID(record, zone: zone)
        let intent: Intent = entry.permission == .readWrite ? .success : .failure(.permissionFailure)
        if await call("deleteRecord", intent, "\(name(entry.person)) (\(entry.permission)) deletes shared \(record)", {
            () async throws(LedgerError) in try await handle.deleteRecord(withID: id)
        }) != nil {
            model.zones[zone].records.removeAll { $0.name == record }
        }
        return true
    }

    /// A user with several invitations fetches them in one CKFetchShareMetadataOperation and
    /// accepts them in one CKAcceptSharesOperation.
    private mutating func acceptWithOperations() async -> Bool {
        var byPerson: [[Int]] = Array(repeating: [], count: model.people.count)
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .pending {
                byPerson[entry.person].append(shareIndex)
            }
        }
        let people = byPerson.indices.filter { byPerson[$0].count >= 2 }
        guard let person = people.randomElement(using: &rng) else { return false }
        let shares = Array(byPerson[person].prefix(8))
        let urls = shares.map { model.shares[$0].url }
        let handle = as_(person)
        guard let fetched = await call("FetchShareMetadataOperation", .success, "\(name(person)) fetches \(urls.count) invitations", {
            () async throws(LedgerError) -> [URL: Result<Share.Metadata, LedgerError>] in
            let results = Collected<[URL: Result<Share.Metadata, LedgerError>]>([:])
            let overall = Collected<Result<Void, LedgerError>?>(nil)
            let operation = FetchShareMetadataOperation(shareURLs: urls)
            operation.perShareMetadataResultBlock = { url, result in results.update { $0[url] = result } }
            operation.fetchShareMetadataResultBlock = { result in overall.update { $0 = result } }
            handle.add(operation)
            await operation.waitUntilFinished()
            if case .failure(let error) = overall.current { throw error }
            return results.current
        }) else { return true }
        var metadatas: [Share.Metadata] = []
        for shareIndex in shares {
            guard let result = fetched[model.shares[shareIndex].url] else {
                mismatch("the fetch operation gave no result for \(model.shares[shareIndex].url)")
                continue
            }
            if let metadata = judge("FetchShareMetadataOperation", .success, result, "\(name(person)) fetches \(model.shares[shareIndex].url)") {
                check(metadata, shareIndex: shareIndex, person: person, fetchRoot: false, keys: nil)
                metadatas.append(metadata)
            }
        }
        let toAccept = metadatas
        guard let accepted = await call("AcceptSharesOperation", .success, "\(name(person)) accepts \(toAccept.count) shares", {
            () async throws(LedgerError) -> [String: Result<Share, LedgerError>] in
            let results = Collected<[String: Result<Share, LedgerError>]>([:])
            let overall = Collected<Result<Void, LedgerError>?>(nil)
            let operation = AcceptSharesOperation(shareMetadatas: toAccept)
            operation.perShareResultBlock = { metadata, result in results.update { $0[metadata.share.token.text] = result } }
            operation.acceptSharesResultBlock = { result in overall.update { $0 = result } }
            handle.add(operation)
            await operation.waitUntilFinished()
            if case .failure(let error) = overall.current { throw error }
            return results.current
        }) else { return true }
        for metadata in toAccept {
            guard let shareIndex = shares.first(where: { model.shares[$0].token == metadata.share.token.text }),
                let result = accepted[metadata.share.token.text]
            else {
                mismatch("the accept operation gave no result for \(metadata.share.url)")
                continue
            }
            if judge("AcceptSharesOperation", .success, result, "\(name(person)) accepts \(metadata.share.url)") != nil {
                let index = model.shares[shareIndex].entryIndex(of: person)!
                model.shares[shareIndex].entries[index].status = .accepted
            }
        }
        return true
    }

    /// Several invitees of one share accept at the same moment while the owner renames it: the
    /// calls land in the same group commits, and every one must succeed whatever their order.
    private mutating func concurrentAccepts() async -> Bool {
        guard
            let shareIndex = pickShare({ share in share.entries.filter { $0.claimed && $0.status == .pending }.count >= 2 })
        else { return false }
        let share = model.shares[shareIndex]
        let invitees = Array(share.entries.filter { $0.claimed && $0.status == .pending }.map(\.person).prefix(3))
        let url = share.url
        var ready: [(Int, Share.Metadata)] = []
        for person in invitees {
            let handle = as_(person)
            if let metadata = await call("shareMetadata", .success, "\(name(person)) fetches \(url)", {
                () async throws(LedgerError) in try await handle.shareMetadata(for: url)
            }) {
                check(metadata, shareIndex: shareIndex, person: person, fetchRoot: false, keys: nil)
                ready.append((person, metadata))
            }
        }
        let title = "Together \(model.nextSerial())"
        var calls: [(kind: String, intent: Intent, what: String, body: @Sendable () async -> Result<Void, LedgerError>)] = []
        for (person, metadata) in ready {
            let handle = as_(person)
            calls.append(("accept", .success, "\(name(person)) accepts \(url) with others", {
                do throws(LedgerError) {
                    _ = try await handle.accept(metadata)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }))
        }
        let owner = as_(share.owner)
        calls.append(("setTitle", .success, "the owner renames \(url) meanwhile", {
            do throws(LedgerError) {
                _ = try await owner.setTitle(title, for: url)
                return .success(())
            } catch {
                return .failure(error)
            }
        }))
        let succeeded = await callConcurrently(calls)
        for (offset, (person, _)) in ready.enumerated() where succeeded[offset] {
            let index = model.shares[shareIndex].entryIndex(of: person)!
            model.shares[shareIndex].entries[index].status = .accepted
        }
        if succeeded.last == true { model.shares[shareIndex].title = title }
        return true
    }

    /// A user lists the shares they own and take part in; the counts must match the model.
    private mutating func listShares() async -> Bool {
        let person = Int.random(in: 0..<model.people.count, using: &rng)
        let handle = as_(person)
        if let owned = await call("ownedShares", .success, "\(name(person)) lists owned shares", { () throws(LedgerError) in
            try handle.ownedShares()
        }) {
            let expected = model.liveShares.filter { model.shares[$0].owner == person }.count
            if owned.count != expected { mismatch("\(name(person)) owns \(owned.count) shares, expected \(expected)") }
        }
        if let participating = await call("participatingShares", .success, "\(name(person)) lists shares", {
            () throws(LedgerError) in try handle.participatingShares()
        }) {
            let expected = model.liveShares.filter { model.shares[$0].activeEntry(of: person) != nil }.count
            if participating.count != expected {
                mismatch("\(name(person)) takes part in \(participating.count) shares, expected \(expected)")
            }
        }
        return true
    }

    // MARK: - Mistakes

    private mutating func fetchUnknownURL() async -> Bool {
        let person = Int.random(in: 0..<model.people.count, using: &rng)
        let url = rng.chance(0.5) ? (model.deadURLs.randomElement(using: &rng) ?? unknownURL()) : unknownURL()
        let handle = as_(person)
        _ = await call("shareMetadata", .failure(.unknownItem), "\(name(person)) fetches unknown \(url)") {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }
        return true
    }

    private mutating func fetchWithoutAccount() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let handle = ledger.container(home, userRecordName: nil)
        let url = model.shares[shareIndex].url
        _ = await call("shareMetadata", .failure(.notAuthenticated), "fetch \(url) with no account") {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }
        return true
    }

    /// Someone with no invitation accepts a forwarded share (the owner's metadata).
    private mutating func acceptUninvited() async -> Bool {
        guard let shareIndex = pickShare({ !$0.isPublic }) else { return false }
        let share = model.shares[shareIndex]
        let strangers = model.people.indices.filter { $0 != share.owner && share.activeEntry(of: $0) == nil }
        guard let stranger = strangers.randomElement(using: &rng) else { return false }
        let owner = as_(share.owner)
        let url = share.url
        guard let metadata = await call("shareMetadata", .success, "the owner fetches \(url)", { () async throws(LedgerError) in
            try await owner.shareMetadata(for: url)
        }) else { return true }
        let handle = as_(stranger)
        _ = await call("accept", .failure(.permissionFailure), "\(name(stranger)) accepts \(url) uninvited") {
            () async throws(LedgerError) in try await handle.accept(metadata)
        }
        return true
    }

    private mutating func acceptInWrongContainer() async -> Bool {
        let travellers = model.people.indices.filter { model.people[$0].otherContainer != nil }
        guard let person = travellers.randomElement(using: &rng), let shareIndex = pickShare({ $0.owner != person }) else {
            return false
        }
        let owner = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        guard let metadata = await call("shareMetadata", .success, "the owner fetches \(url)", { () async throws(LedgerError) in
            try await owner.shareMetadata(for: url)
        }) else { return true }
        let elsewhere = ledger.container(model.people[person].otherContainer!, userRecordName: name(person))
        _ = await call("accept", .failure(.badContainer), "\(name(person)) accepts \(url) in the wrong container") {
            () async throws(LedgerError) in try await elsewhere.accept(metadata)
        }
        return true
    }

    private mutating func wrongAddressVerification() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let share = model.shares[shareIndex]
        let people = model.people.indices.filter { $0 != share.owner && share.activeEntry(of: $0) == nil }
        guard let person = people.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let url = share.url
        let address = "nobody-\(model.nextSerial())@nowhere.example"
        _ = await call("requestParticipantVerification", .failure(.unknownItem), "\(name(person)) verifies \(PersonalData.redact(address, as: .emailAddress))") {
            () async throws(LedgerError) in
            try await handle.requestParticipantVerification(for: url, lookupInfo: LookupInfo(emailAddress: address))
        }
        return true
    }

    private mutating func inviteToPublicShare() async -> Bool {
        guard let shareIndex = pickShare({ $0.isPublic }) else { return false }
        let share = model.shares[shareIndex]
        guard let person = model.people.indices.filter({ $0 != share.owner }).randomElement(using: &rng) else { return false }
        let handle = as_(share.owner)
        let url = share.url
        let lookup = LookupInfo(userRecordID: RecordID(userRecordName: name(person)))
        _ = await call("addParticipant", .failure(.invalidArguments), "invite \(name(person)) to public \(url)") {
            () async throws(LedgerError) in try await handle.addParticipant(lookup, permission: .readOnly, to: url)
        }
        return true
    }

    /// The owner shares a record that is in a share already (the root, a record below it or above
    /// it), or the whole zone of a shared hierarchy.
    private mutating func shareAlreadyShared() async -> Bool {
        guard let shareIndex = pickShare({ $0.root != nil }) else { return false }
        let share = model.shares[shareIndex]
        let zone = model.zones[share.zone]
        let root = share.root!
        let handle = as_(share.owner)
        if rng.chance(0.2) {
            let zoneID = RecordZoneID(zoneName: zone.name)
            _ = await call("shareZone", .failure(.invalidArguments), "share zone \(zone.name), which holds a shared hierarchy") {
                () async throws(LedgerError) in try await handle.share(recordZoneID: zoneID)
            }
            return true
        }
        // Records in the share, and the root's ancestors (whose subtree holds the share).
        let related = zone.records.map(\.name).filter { zone.chain(from: $0, reaches: root) || zone.chain(from: root, reaches: $0) }
        let record = related.randomElement(using: &rng) ?? root
        let id = recordID(record, zone: share.zone)
        _ = await call("shareRecord", .failure(.alreadyShared), "share \(record), related to shared \(root)") {
            () async throws(LedgerError) in try await handle.share(rootRecord: id)
        }
        return true
    }

    /// A second zone-wide share of a zone ("record to insert already exists"), or a hierarchy in a
    /// zone shared as a whole.
    private mutating func secondZoneShare() async -> Bool {
        guard let shareIndex = pickShare({ $0.root == nil }) else { return false }
        let share = model.shares[shareIndex]
        let zone = model.zones[share.zone]
        let handle = as_(share.owner)
        if let record = zone.records.randomElement(using: &rng), rng.chance(0.4) {
            let id = recordID(record.name, zone: share.zone)
            _ = await call("shareRecord", .failure(.serverRejectedRequest), "share \(record.name) in zone-wide shared \(zone.name)") {
                () async throws(LedgerError) in try await handle.share(rootRecord: id)
            }
        } else {
            let zoneID = RecordZoneID(zoneName: zone.name)
            _ = await call("shareZone", .failure(.serverRecordChanged), "share zone \(zone.name) a second time") {
                () async throws(LedgerError) in try await handle.share(recordZoneID: zoneID)
            }
        }
        return true
    }

    private mutating func ownerLeaves() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let handle = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        _ = await call("leaveShare", .failure(.invalidArguments), "the owner leaves \(url)") { () async throws(LedgerError) in
            try await handle.leaveShare(url)
        }
        return true
    }

    /// A participant tries what only the owner may: change the public permission or delete the share.
    private mutating func notOwnerManages() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status != .removed {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let url = model.shares[shareIndex].url
        if rng.chance(0.5) {
            _ = await call("deleteShare", .failure(.permissionFailure), "\(name(person)) deletes \(url)") {
                () async throws(LedgerError) in try await handle.deleteShare(url)
            }
        } else {
            _ = await call("setPublicPermission", .failure(.permissionFailure), "\(name(person)) makes \(url) public") {
                () async throws(LedgerError) in try await handle.setPublicPermission(.readWrite, for: url)
            }
        }
        return true
    }

    private mutating func participantDeletesRoot() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares where model.shares[shareIndex].root != nil {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .accepted {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let share = model.shares[shareIndex]
        let handle = as_(person)
        let id = recordID(share.root!, zone: share.zone)
        _ = await call("deleteRecord", .failure(.permissionFailure), "\(name(person)) deletes the root of \(share.url)") {
            () async throws(LedgerError) in try await handle.deleteRecord(withID: id)
        }
        return true
    }

    /// A participant leaves a share they left already (or were removed from): the share is gone for them.
    private mutating func leaveTwice() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .removed {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let url = model.shares[shareIndex].url
        _ = await call("leaveShare", .failure(.unknownItem), "\(name(person)) leaves \(url) again") { () async throws(LedgerError) in
            try await handle.leaveShare(url)
        }
        return true
    }

    /// An invitee fetches the metadata, the owner deletes the share, the invitee accepts the
    /// metadata it holds (§9.3: "share not found").
    private mutating func acceptDeletedShare() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status == .pending {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let owner = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        guard let metadata = await call("shareMetadata", .success, "\(name(person)) fetches \(url)", {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }) else { return true }
        guard await call("deleteShare", .success, "the owner deletes \(url)", { () async throws(LedgerError) in
            try await owner.deleteShare(url)
        }) != nil else { return true }
        model.killShare(shareIndex)
        _ = await call("accept", .failure(.unknownItem), "\(name(person)) accepts deleted \(url)") { () async throws(LedgerError) in
            try await handle.accept(metadata)
        }
        return true
    }

    /// Someone reads a record of another user's zone that is not shared with them.
    private mutating func readNotShared() async -> Bool {
        let zones = model.liveZones.filter { !model.zones[$0].records.isEmpty }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let z = model.zones[zone]
        let record = z.records.randomElement(using: &rng)!.name
        let readers = model.people.indices.filter { person in
            guard person != z.owner else { return false }
            guard let share = z.share, model.shares[share].activeEntry(of: person)?.status == .accepted else { return true }
            return !model.covered(share).contains(record)
        }
        guard let person = readers.randomElement(using: &rng) else { return false }
        let handle = as_(person)
        let id = recordID(record, zone: zone)
        _ = await call("fetchRecord", .failure(.unknownItem), "\(name(person)) reads unshared \(record)") {
            () throws(LedgerError) in try handle.record(for: id)
        }
        return true
    }

    // MARK: - Access requests

    /// One access request as a stranger with the URL: refused while the share takes no requests (the
    /// unknown URL's answer), then allowed by a manager, asked for, and approved (the requester becomes
    /// a pending participant marked approved), denied (approving it afterwards finds nothing), or
    /// blocked (a blocked user's request gets the unknown URL's answer) and unblocked again.
    private mutating func accessRequest() async -> Bool {
        guard let shareIndex = pickShare({ !$0.isPublic && $0.entries.count < 90 }) else { return false }
        let share = model.shares[shareIndex]
        let strangers = model.people.indices.filter { $0 != share.owner && share.entryIndex(of: $0) == nil }
        guard let person = strangers.randomElement(using: &rng) else { return false }
        let manager = as_(manager(of: shareIndex))
        let asker = as_(person)
        let url = share.url
        let who = model.people[person].name
        let identity = Self.identity(who)
        let requester = Share.AccessRequester(userIdentity: identity, participantLookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: who)))
        if !share.allowsAccessRequests {
            _ = await call("requestAccess", .failure(.unknownItem), "\(who) asks to join \(share.token), which takes no requests") {
                () async throws(LedgerError) in try await Self.requestAccess(asker, url)
            }
            guard await call("setAllowsAccessRequests", .success, "allow access requests to \(share.token)", {
                () async throws(LedgerError) in try await manager.setAllowsAccessRequests(true, for: url)
            }) != nil else { return true }
            model.shares[shareIndex].allowsAccessRequests = true
        }
        guard await call("requestAccess", .success, "\(who) asks to join \(share.token)", {
            () async throws(LedgerError) in try await Self.requestAccess(asker, url)
        }) != nil else { return true }
        switch Int.random(in: 0..<3, using: &rng) {
        case 0:
            guard let result = await call("approveRequesters", .success, "approve \(who) on \(share.token)", {
                () async throws(LedgerError) in try await manager.approveRequesters([requester], for: url)
            }) else { return true }
            guard let entry = result.participants.first(where: { $0.userIdentity.userRecordID?.recordName == who }),
                entry.isApprovedRequester, entry.acceptanceStatus == .pending, result.requesters.isEmpty
            else {
                mismatch("approving \(who) on \(share.token) did not make an approved pending participant")
                return true
            }
            model.shares[shareIndex].entries.append(
                SimEntry(
                    person: person, participantID: entry.participantID, kind: .account, claimed: true, status: .pending,
                    role: .privateUser, permission: .readOnly))
        case 1:
            guard await call("denyRequesters", .success, "deny \(who) on \(share.token)", {
                () async throws(LedgerError) in try await manager.denyRequesters([requester], for: url)
            }) != nil else { return true }
            _ = await call("approveRequesters", .failure(.unknownItem), "approve the denied \(who) on \(share.token)") {
                () async throws(LedgerError) in try await manager.approveRequesters([requester], for: url)
            }
        default:
            guard await call("blockRequesters", .success, "block \(who) on \(share.token)", {
                () async throws(LedgerError) in try await manager.blockRequesters([requester], for: url)
            }) != nil else { return true }
            _ = await call("requestAccess", .failure(.unknownItem), "blocked \(who) asks to join \(share.token)") {
                () async throws(LedgerError) in try await Self.requestAccess(asker, url)
            }
            _ = await call("unblockIdentities", .success, "unblock \(who) on \(share.token)") {
                () async throws(LedgerError) in try await manager.unblockIdentities([Share.BlockedIdentity(userIdentity: identity)], for: url)
            }
        }
        return true
    }

    /// A manager blocks a participant: they are removed and their fetch gets the unknown URL's answer;
    /// then they are unblocked (and stay removed until invited again).
    private mutating func blockParticipant() async -> Bool {
        var candidates: [(Int, Int)] = []
        for shareIndex in model.liveShares {
            for entry in model.shares[shareIndex].entries where entry.claimed && entry.status != .removed && entry.role != .administrator {
                candidates.append((shareIndex, entry.person))
            }
        }
        guard let (shareIndex, person) = candidates.randomElement(using: &rng) else { return false }
        let share = model.shares[shareIndex]
        let manager = as_(share.owner)
        let blocked = as_(person)
        let url = share.url
        let who = model.people[person].name
        let identity = Self.identity(who)
        guard let result = await call("blockRequesters", .success, "block participant \(who) of \(share.token)", {
            () async throws(LedgerError) in try await manager.blockIdentities([identity], for: url)
        }) else { return true }
        guard let index = model.shares[shareIndex].entryIndex(of: person) else { return true }
        model.shares[shareIndex].entries[index].status = .removed
        if result.participants.first(where: { $0.participantID == model.shares[shareIndex].entries[index].participantID })?.acceptanceStatus != .removed {
            mismatch("blocking \(who) did not remove them from \(share.token)")
        }
        _ = await call("shareMetadata", .failure(.unknownItem), "blocked \(who) fetches \(share.token)") {
            () async throws(LedgerError) in try await blocked.shareMetadata(for: url)
        }
        _ = await call("unblockIdentities", .success, "unblock \(who) on \(share.token)") {
            () async throws(LedgerError) in try await manager.unblockIdentities([Share.BlockedIdentity(userIdentity: identity)], for: url)
        }
        return true
    }

    /// A manager invites a one-time URL participant; someone not in the share fetches the metadata
    /// through that URL and accepts (becoming that participant); someone else then presents the used
    /// URL and learns nothing (an intended unknownItem).
    private mutating func oneTimeURL() async -> Bool {
        guard let shareIndex = pickShare({ !$0.isPublic && $0.entries.count < 90 }) else { return false }
        let share = model.shares[shareIndex]
        let strangers = model.people.indices.filter { $0 != share.owner && share.entryIndex(of: $0) == nil }
        guard strangers.count >= 2 else { return false }
        let chosen = strangers.shuffled(using: &rng)
        let (person, other) = (chosen[0], chosen[1])
        let manager = as_(manager(of: shareIndex))
        let (taker, late) = (as_(person), as_(other))
        let url = share.url
        guard let result = await call("addParticipant", .success, "invite a one-time URL participant to \(share.token)", {
            () async throws(LedgerError) in try await manager.addParticipant(.oneTimeURLParticipant(), to: url)
        }) else { return true }
        // The new participant: a one-time URL's stays its participant's after acceptance, so earlier
        // ones may show too.
        let known = Set(share.entries.map(\.participantID))
        guard
            let entry = result.participants.filter({
                !known.contains($0.participantID) && $0.userIdentity.userRecordID == nil && result.oneTimeURL(for: $0.participantID) != nil
            }).max(by: { ($0.dateAddedToShare ?? .distantPast) < ($1.dateAddedToShare ?? .distantPast) }),
            let oneTime = result.oneTimeURL(for: entry.participantID)
        else {
            mismatch("inviting a one-time URL participant to \(share.token) gave no one-time URL")
            return true
        }
        guard let metadata = await call("shareMetadata", .success, "\(name(person)) fetches a one-time URL of \(share.token)", {
            () async throws(LedgerError) in try await taker.shareMetadata(for: oneTime)
        }) else { return true }
        guard let accepted = await call("accept", .success, "\(name(person)) accepts a one-time URL of \(share.token)", {
            () async throws(LedgerError) in try await taker.accept(metadata)
        }) else { return true }
        if accepted.currentUserParticipant?.participantID != entry.participantID {
            mismatch("accepting a one-time URL of \(share.token) did not make \(name(person)) its participant")
        }
        model.shares[shareIndex].entries.append(
            SimEntry(
                person: person, participantID: entry.participantID, kind: .account, claimed: true, status: .accepted,
                role: .privateUser, permission: .readOnly))
        _ = await call("shareMetadata", .failure(.unknownItem), "\(name(other)) presents a used one-time URL of \(share.token)") {
            () async throws(LedgerError) in try await late.shareMetadata(for: oneTime)
        }
        return true
    }

    /// The identity of account `name`, as requesters and blocked identities name it.
    static func identity(_ name: String) -> UserIdentity {
        UserIdentity(
            userRecordID: RecordID(userRecordName: name), lookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: name)),
            nameComponents: nil, hasiCloudAccount: true)
    }

    /// One URL's access request, its outcome thrown.
    static func requestAccess(_ handle: Container, _ url: URL) async throws(LedgerError) {
        guard let result = try await handle.requestShareAccess(for: [url])[url] else {
            throw LedgerError(.serverRejectedRequest, "the access request got no answer")
        }
        try result.get()
    }
}
