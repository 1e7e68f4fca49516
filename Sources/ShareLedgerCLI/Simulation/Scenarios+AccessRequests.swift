import Foundation
import ShareLedger

// Access requests, blocked identities and one-time URLs.
extension SimulationClient {
    /// One access request as a stranger with the URL: refused while the share takes no requests (the
    /// unknown URL's answer), then allowed by a manager, asked for, and approved (the requester becomes
    /// a pending participant marked approved), denied (approving it afterwards finds nothing), or
    /// blocked (a blocked user's request gets the unknown URL's answer) and unblocked again.
    mutating func accessRequest() async -> Bool {
        guard let shareIndex = pickShare({ !$0.isPublic && $0.entries.count < 90 }) else { return false }
        let share = model.shares[shareIndex]
        let strangers = model.people.indices.filter { $0 != share.owner && share.entryIndex(of: $0) == nil }
        guard let person = strangers.randomElement(using: &rng) else { return false }
        let manager = as_(manager(of: shareIndex))
        let asker = as_(person)
        let url = share.url
        let who = model.people[person].name
        let identity = UserIdentity.account(who)
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
    mutating func blockParticipant() async -> Bool {
        guard let (shareIndex, person) = pickEntry({ $0.claimed && $0.status != .removed && $0.role != .administrator }) else { return false }
        let share = model.shares[shareIndex]
        let manager = as_(share.owner)
        let blocked = as_(person)
        let url = share.url
        let who = model.people[person].name
        let identity = UserIdentity.account(who)
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
    mutating func oneTimeURL() async -> Bool {
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

    /// One URL's access request, its outcome thrown.
    static func requestAccess(_ handle: Container, _ url: URL) async throws(LedgerError) {
        guard let result = try await handle.requestShareAccess(for: [url])[url] else {
            throw LedgerError(.serverRejectedRequest, "the access request got no answer")
        }
        try result.get()
    }
}
