import Foundation
import ShareLedger

// Management: an owner's or administrator's invitations, permissions, removals and deletions.
extension SimulationClient {
    /// The owner or an administrator invites someone of the partition, by account, email, phone, or
    /// an address no account has (which the invitee later verifies).
    mutating func invite() async -> Bool {
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

    mutating func setPermission() async -> Bool {
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

    mutating func removeParticipant() async -> Bool {
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

    mutating func setPublicPermission() async -> Bool {
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
    mutating func staleShareTag() async -> Bool {
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

    mutating func deleteShare() async -> Bool {
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
}
