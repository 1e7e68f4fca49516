import Foundation
import ShareLedger

/// The newer sharing features, which CloudKit Web Services has no calls for (extensions, documented
/// as such in docs/openapi.yaml), in its style: JSON bodies, a share named by its `shortGUID` (what
/// `records/resolve` and `records/accept` take), answers with the share record dictionary or per-item
/// results. Access requests (`shares/accessRequests/…`), blocked identities
/// (`shares/identities/…`), one-time URL participants (`shares/oneTimeParticipants/add`); and
/// participant lookup (`users/lookup/phone`, `users/lookup/id`, `users/lookup/participants`, like
/// `users/lookup/email`). Each goes through the library's public API, so it is decided, logged and
/// audited like the same call in process.
extension Endpoints {
    /// The share URL of the request's `shortGUID`; a value that cannot be a share's token answers as
    /// an unknown share.
    static func shareURL(_ request: DatabaseRequest) throws(WireError) -> URL {
        let text = try request.body.required("shortGUID", in: "body").string("shortGUID")
        guard let token = ShareToken(text), let url = ShareURL.make(host: request.shareURLHost, token: token) else {
            throw unknownShortGUID
        }
        return url
    }

    /// The accounts of `users` (`[{"userRecordName": …}]`), as identities.
    static func identities(_ request: DatabaseRequest) throws(WireError) -> [UserIdentity] {
        var out: [UserIdentity] = []
        for (index, item) in try request.items("users").enumerated() {
            let path = "users[\(index)]"
            let name = try item.required("userRecordName", in: path).string(path + ".userRecordName")
            let id = RecordID(userRecordName: name)
            out.append(UserIdentity(userRecordID: id, lookupInfo: LookupInfo(userRecordID: id), nameComponents: nil, hasiCloudAccount: true))
        }
        return out
    }

    static func requesters(_ request: DatabaseRequest) throws(WireError) -> [Share.AccessRequester] {
        try identities(request).compactMap { identity in
            identity.lookupInfo.map { Share.AccessRequester(userIdentity: identity, participantLookupInfo: $0) }
        }
    }

    /// Runs a change of one share and answers `{"share": share dictionary}`.
    static func shareChange(
        _ request: DatabaseRequest, _ change: (Container, URL) async throws(LedgerError) -> Share
    ) async throws(WireError) -> JSONValue {
        try request.requirePrivateOrShared("managing a share")
        let url = try shareURL(request)
        do {
            return ["share": Wire.share(try await change(request.container, url))]
        } catch {
            throw WireError(error)
        }
    }

    // MARK: - Access requests

    /// `shares/accessRequests/allow`: `{shortGUID, allowsAccessRequests, recordChangeTag?}`.
    @Sendable static func allowAccessRequests(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let allowed = try request.body.required("allowsAccessRequests", in: "body").bool("allowsAccessRequests")
        let tag = try request.body.optionalString("recordChangeTag", in: "body")
        return try await shareChange(request) { container, url throws(LedgerError) in
            try await container.setAllowsAccessRequests(allowed, for: url, ifChangeTag: tag)
        }
    }

    /// `shares/accessRequests/request`: `{shortGUIDs: [{value}]}`, one result per item, in order:
    /// `{shortGUID, requested: true}` or an error dictionary. A share that does not take requests,
    /// one the caller is blocked from and a value no share has answer alike (`NOT_FOUND`).
    @Sendable static func requestAccess(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let items = try shortGUIDs(request)
        let urls = items.map { item in item.token.flatMap { ShareURL.make(host: request.shareURLHost, token: $0) } }
        let answers: [URL: Result<Void, LedgerError>]
        do {
            answers = try await request.container.requestShareAccess(for: urls.compactMap { $0 })
        } catch {
            throw WireError(error)
        }
        let results: [JSONValue] = zip(items, urls).map { item, url in
            guard let url, let answer = answers[url] else { return itemError(unknownShortGUID, ["shortGUID": item.echo]) }
            switch answer {
            case .success: return ["shortGUID": item.echo, "requested": true]
            case .failure(let error): return itemError(WireError(error), ["shortGUID": item.echo])
            }
        }
        return ["results": .array(results)]
    }

    /// `shares/accessRequests/approve`: `{shortGUID, users: [{userRecordName}], permission?}`; each
    /// requester becomes an invited participant. All or nothing.
    @Sendable static func approveRequesters(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let requesters = try requesters(request)
        let permission = try request.body["permission"].map { value throws(WireError) in try Wire.parsePermission(value, path: "permission") } ?? .readOnly
        return try await shareChange(request) { container, url throws(LedgerError) in
            try await container.approveRequesters(requesters, permission: permission, for: url)
        }
    }

    /// `shares/accessRequests/deny`: `{shortGUID, users}`. All or nothing.
    @Sendable static func denyRequesters(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let requesters = try requesters(request)
        return try await shareChange(request) { container, url throws(LedgerError) in
            try await container.denyRequesters(requesters, for: url)
        }
    }

    /// `shares/identities/block`: `{shortGUID, users}`; requesters or participants (who are removed). All or nothing.
    @Sendable static func blockIdentities(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let identities = try identities(request)
        return try await shareChange(request) { container, url throws(LedgerError) in
            try await container.blockIdentities(identities, for: url)
        }
    }

    /// `shares/identities/unblock`: `{shortGUID, users}`. All or nothing.
    @Sendable static func unblockIdentities(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        let blocked = try identities(request).map(Share.BlockedIdentity.init(userIdentity:))
        return try await shareChange(request) { container, url throws(LedgerError) in
            try await container.unblockIdentities(blocked, for: url)
        }
    }

    // MARK: - One-time URL participants

    /// `shares/oneTimeParticipants/add`: `{shortGUID, permission?, type?}` → `{share, participantId,
    /// oneTimeURL, oneTimeShortGUID}`: a participant with no email, phone or account, reached by its
    /// own URL (its shortGUID works in `records/resolve` and `records/accept`).
    @Sendable static func addOneTimeParticipant(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        var participant = Share.Participant.oneTimeURLParticipant()
        if let permission = request.body["permission"] { participant.permission = try Wire.parsePermission(permission, path: "permission") }
        switch try request.body.optionalString("type", in: "body") ?? "USER" {
        case "USER": participant.role = .privateUser
        case "ADMINISTRATOR": participant.role = .administrator
        default: throw WireError(.badRequest, "type must be USER or ADMINISTRATOR")
        }
        let tag = try request.body.optionalString("recordChangeTag", in: "body")
        try request.requirePrivateOrShared("managing a share")
        let url = try shareURL(request)
        let before: Set<String>
        let share: Share
        do {
            before = Set(try request.container.share(for: url).participants.map(\.participantID))
            share = try await request.container.addParticipant(participant, to: url, ifChangeTag: tag)
        } catch {
            throw WireError(error)
        }
        guard let added = share.participants.first(where: { !before.contains($0.participantID) }),
            let oneTimeURL = share.oneTimeURL(for: added.participantID), let token = ShareURL.token(in: oneTimeURL)
        else {
            throw WireError(.internalError, "the one-time participant was added but its URL is not in the answer; fetch the share")
        }
        return [
            "share": Wire.share(share), "participantId": .string(added.participantID),
            "oneTimeURL": .string(oneTimeURL.absoluteString), "oneTimeShortGUID": .string(token.text),
        ]
    }

    // MARK: - Participant lookup

    /// `users/lookup/phone`: `{users: [{phoneNumber}]}`, like `users/lookup/email`.
    @Sendable static func lookupPhone(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try await lookupUsers(request, key: "phoneNumber") { LookupInfo(phoneNumber: $0) }
    }

    /// `users/lookup/id`: `{users: [{userRecordName}]}`, like `users/lookup/email`.
    @Sendable static func lookupID(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        try await lookupUsers(request, key: "userRecordName") { LookupInfo(userRecordID: RecordID(userRecordName: $0)) }
    }

    /// `users/lookup/email|phone|id`: the identity of each registered user found, an error for the
    /// others; every lookup recorded in the log as a participant lookup (`Container.discoverUserIdentities(for:)`).
    static func lookupUsers(
        _ request: DatabaseRequest, key: String, _ lookup: (String) -> LookupInfo
    ) async throws(WireError) -> JSONValue {
        var values: [String] = []
        for (index, item) in try request.items("users").enumerated() {
            let path = "users[\(index)]"
            values.append(try item.required(key, in: path).string(path + "." + key))
        }
        let answers: [LookupInfo: Result<UserIdentity, LedgerError>]
        do {
            answers = try await request.container.discoverUserIdentities(for: values.map(lookup))
        } catch {
            throw WireError(error)
        }
        let results: [JSONValue] = values.map { value in
            switch answers[lookup(value)] {
            case .success(let identity)?: return Wire.identity(identity)
            case .failure(let error)?: return itemError(WireError(error), [key: .string(value)])
            case nil: return itemError(WireError(.notFound, "no user has this \(key)"), [key: .string(value)])
            }
        }
        return ["users": .array(results)]
    }

    /// `users/lookup/participants`: `{lookupInfos: [{emailAddress} | {phoneNumber} | {userRecordName}]}`
    /// → `{participants: [participant dictionary or error]}` (CloudKit's `CKFetchShareParticipantsOperation`):
    /// an address no account has still gives a participant (`userIdentity.hasiCloudAccount` false) to
    /// invite. Every lookup is recorded in the log.
    @Sendable static func lookupParticipants(_ request: DatabaseRequest) async throws(WireError) -> JSONValue {
        var infos: [(info: LookupInfo, echo: JSONValue)] = []
        for (index, item) in try request.items("lookupInfos").enumerated() {
            let path = "lookupInfos[\(index)]"
            let email = try item.optionalString("emailAddress", in: path)
            let phone = try item.optionalString("phoneNumber", in: path)
            let user = try item.optionalString("userRecordName", in: path)
            guard [email, phone, user].compactMap({ $0 }).count == 1 else {
                throw WireError(.badRequest, "\(path) needs exactly one of emailAddress, phoneNumber and userRecordName")
            }
            let info =
                if let email { LookupInfo(emailAddress: email) } else if let phone { LookupInfo(phoneNumber: phone) } else {
                    LookupInfo(userRecordID: RecordID(userRecordName: user ?? ""))
                }
            infos.append((info, item))
        }
        let answers: [LookupInfo: Result<Share.Participant, LedgerError>]
        do {
            answers = try await request.container.shareParticipants(for: infos.map(\.info))
        } catch {
            throw WireError(error)
        }
        let results: [JSONValue] = infos.map { item in
            switch answers[item.info] {
            case .success(let participant)?: return Wire.participant(participant)
            case .failure(let error)?: return itemError(WireError(error), ["lookupInfo": item.echo])
            case nil: return itemError(WireError(.notFound, "not looked up"), ["lookupInfo": item.echo])
            }
        }
        return ["participants": .array(results)]
    }
}

extension Wire {
    /// A participant dictionary whose identity says whether the person has an account
    /// (`userIdentity.hasiCloudAccount`): what a participant lookup answers.
    static func participant(_ participant: Share.Participant) -> JSONValue {
        let identity = participant.userIdentity
        var lookup: [String: JSONValue] = [:]
        if let email = identity.lookupInfo?.emailAddress { lookup["emailAddress"] = .string(email) }
        if let phone = identity.lookupInfo?.phoneNumber { lookup["phoneNumber"] = .string(phone) }
        if let user = identity.lookupInfo?.userRecordID?.recordName { lookup["userRecordName"] = .string(user) }
        var user: [String: JSONValue] = ["lookupInfo": .object(lookup), "hasiCloudAccount": .bool(identity.hasiCloudAccount)]
        if let name = identity.userRecordID?.recordName { user["userRecordName"] = .string(name) }
        if let names = identity.nameComponents {
            var components: [String: JSONValue] = [:]
            if let given = names.givenName { components["givenName"] = .string(given) }
            if let family = names.familyName { components["familyName"] = .string(family) }
            user["nameComponents"] = .object(components)
        }
        return [
            "acceptanceStatus": .string("\(status(participant.acceptanceStatus))"), "participantId": .string(participant.participantID),
            "permission": .string("\(permission(participant.permission))"), "type": .string("\(type(participant.role))"),
            "userIdentity": .object(user),
        ]
    }
}
