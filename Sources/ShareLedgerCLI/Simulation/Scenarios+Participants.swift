import Foundation
import ShareLedger

// Participants: fetching metadata, accepting, verifying, leaving, and working in shared records.
extension SimulationClient {
    /// Someone fetches a share's metadata: a participant, the owner, or anyone of the partition.
    mutating func fetchMetadata() async -> Bool {
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
    mutating func fetchMetadataBatch() async -> Bool {
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
    mutating func accept() async -> Bool {
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
    mutating func acceptAgain() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ $0.claimed && $0.status == .accepted }) else { return false }
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
    mutating func verify() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ !$0.claimed && $0.status == .pending }) else { return false }
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

    mutating func leave() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ $0.claimed && $0.status != .removed }) else { return false }
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
    mutating func participantEdit() async -> Bool {
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
    mutating func participantDeletes() async -> Bool {
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
    mutating func acceptWithOperations() async -> Bool {
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
    mutating func concurrentAccepts() async -> Bool {
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
    mutating func listShares() async -> Bool {
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
}
