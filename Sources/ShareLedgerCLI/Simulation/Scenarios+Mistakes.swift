import Foundation
import ShareLedger

// Mistakes real clients make, each with the error CloudKit answers.
extension SimulationClient {
    mutating func fetchUnknownURL() async -> Bool {
        let person = Int.random(in: 0..<model.people.count, using: &rng)
        let url = rng.chance(0.5) ? (model.deadURLs.randomElement(using: &rng) ?? unknownURL()) : unknownURL()
        let handle = as_(person)
        _ = await call("shareMetadata", .failure(.unknownItem), "\(name(person)) fetches unknown \(url)") {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }
        return true
    }

    mutating func fetchWithoutAccount() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let handle = ledger.container(home, userRecordName: nil)
        let url = model.shares[shareIndex].url
        _ = await call("shareMetadata", .failure(.notAuthenticated), "fetch \(url) with no account") {
            () async throws(LedgerError) in try await handle.shareMetadata(for: url)
        }
        return true
    }

    /// Someone with no invitation accepts a forwarded share (the owner's metadata).
    mutating func acceptUninvited() async -> Bool {
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

    mutating func acceptInWrongContainer() async -> Bool {
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

    mutating func wrongAddressVerification() async -> Bool {
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

    mutating func inviteToPublicShare() async -> Bool {
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
    mutating func shareAlreadyShared() async -> Bool {
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
    mutating func secondZoneShare() async -> Bool {
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

    mutating func ownerLeaves() async -> Bool {
        guard let shareIndex = pickShare({ _ in true }) else { return false }
        let handle = as_(model.shares[shareIndex].owner)
        let url = model.shares[shareIndex].url
        _ = await call("leaveShare", .failure(.invalidArguments), "the owner leaves \(url)") { () async throws(LedgerError) in
            try await handle.leaveShare(url)
        }
        return true
    }

    /// A participant tries what only the owner may: change the public permission or delete the share.
    mutating func notOwnerManages() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ $0.claimed && $0.status != .removed }) else { return false }
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

    mutating func participantDeletesRoot() async -> Bool {
        guard let (shareIndex, person) = pickEntry(inShares: { $0.root != nil }, { $0.claimed && $0.status == .accepted }) else { return false }
        let share = model.shares[shareIndex]
        let handle = as_(person)
        let id = recordID(share.root!, zone: share.zone)
        _ = await call("deleteRecord", .failure(.permissionFailure), "\(name(person)) deletes the root of \(share.url)") {
            () async throws(LedgerError) in try await handle.deleteRecord(withID: id)
        }
        return true
    }

    /// A participant leaves a share they left already (or were removed from): the share is gone for them.
    mutating func leaveTwice() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ $0.claimed && $0.status == .removed }) else { return false }
        let handle = as_(person)
        let url = model.shares[shareIndex].url
        _ = await call("leaveShare", .failure(.unknownItem), "\(name(person)) leaves \(url) again") { () async throws(LedgerError) in
            try await handle.leaveShare(url)
        }
        return true
    }

    /// An invitee fetches the metadata, the owner deletes the share, the invitee accepts the
    /// metadata it holds (§9.3: "share not found").
    mutating func acceptDeletedShare() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ $0.claimed && $0.status == .pending }) else { return false }
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
    mutating func readNotShared() async -> Bool {
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
}
