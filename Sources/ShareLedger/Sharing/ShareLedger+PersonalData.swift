import EventLog
import Foundation
import LMDB
import SharingDomain

extension ShareLedger {
    /// The key store's file in the ledger directory (`docs/log-format.md`, "Key store"): the keys
    /// that seal personal data. Back it up with the ledger; a new ledger directory may hold a copy
    /// before its first open (to import an export whose personal data should stay readable).
    public static let keyStoreFileName = PersonalDataVault.fileName

    /// Carries out an erasure request (GDPR art. 17): forgets the personal data (email address,
    /// phone number, name, share titles, and the invitations and lookups addressed to them) of user
    /// `userRecordName` in `containerIdentifier` by crypto-shredding.
    ///
    /// In one committed step it appends `PersonalDataForgotten` (the requester is the envelope's
    /// actor, the time its recorded-at; no personal data) and marks the user's row as erased,
    /// removing its lookup entries, and erases the participant rows of every invitation to the
    /// email address or phone number the user registered with, or bound to the user; then it
    /// destroys the user's key and those addresses' keys in the key store, which makes every box
    /// sealed under them unreadable: in the log, in exports, in backups of the log. The hash chain
    /// covers the ciphertext, so `verify` and `audit` stay clean.
    ///
    /// Forgetting is idempotent: forgetting a forgotten user succeeds, appends nothing and destroys
    /// the key if a crash left it behind (``open(_:)`` does that too for every forgotten user).
    ///
    /// - Parameters:
    ///   - userRecordName: The user to forget.
    ///   - containerIdentifier: The container the user is registered in.
    ///   - requestedBy: Who asked, recorded as the event's actor: a role or ticket reference such as
    ///     `operator` or `dsr-1234`, never a person's name or email (it is not erased).
    /// - Returns: The user's identity, now with `UserIdentity.personalDataErased` set.
    /// - Throws: `LedgerError.Code.unknownItem` when the user is not registered there,
    ///   `LedgerError.Code.invalidArguments` for a malformed name, `LedgerError.Code.storageFailure`
    ///   when the key store cannot be rewritten (the event is committed then: run forget again).
    @discardableResult
    public func forget(user userRecordName: String, in containerIdentifier: String, requestedBy: String = "operator")
        async throws(LedgerError) -> UserIdentity
    {
        try Decider.checkUserName(userRecordName)
        try Decider.checkUserName(requestedBy)
        guard models.vault != nil else {
            throw LedgerError(.readOnly, "the ledger has no key store open for writing; open it for writing to forget a user")
        }
        // The addresses whose keys go with the user's (read before the erasure drops them from the rows).
        let addresses = try read("reading the addresses of the user to forget") { txn in
            let registered = try models.user(txn, containerIdentifier, userRecordName).map {
                models.registeredAddresses(of: $0, container: containerIdentifier)
            }
            return (registered ?? []) + (try models.boundAddresses(txn, containerIdentifier, user: userRecordName))
        }
        let output = try await container(containerIdentifier, userRecordName: requestedBy).runOne(
            .forgetUser(name: userRecordName))
        guard case .user(var identity) = output else { throw LedgerError.unexpectedOutput("forget") }
        // After the commit: a crash before these lines leaves a forgotten user (or address) whose key
        // survives, which the next open (or the next forget) destroys.
        try destroyKeys(ofForgotten: addresses, in: containerIdentifier, with: userRecordName)
        dropKeptAnswers()
        identity.personalDataErased = true
        return identity
    }

    /// Carries out an erasure request for an email address or phone number that no user registered
    /// with (an invitee who never made an account, or someone looked up by it): forgets what the
    /// invitations and participant lookups addressed to it hold of it, by crypto-shredding.
    ///
    /// Invitations and lookups are sealed under a key of their address (`AddressHash`), so that an
    /// invitee with no account can be forgotten too. In one committed step it appends
    /// `PersonalDataForgotten` naming the address only by its keyed hash (the requester is the
    /// envelope's actor) and erases the participant rows of the invitations to it; then it destroys
    /// the address's key. Answers show those participants with `UserIdentity.personalDataErased`
    /// and no lookup info; verifying such an invitation by that address no longer finds it.
    ///
    /// Forgetting is idempotent: forgetting a forgotten address appends nothing (unless something was
    /// sealed to it since) and destroys the key if a crash left it behind (``open(_:)`` does that too).
    /// An address nothing was ever sealed to gets the event all the same: the request is recorded.
    ///
    /// - Parameters:
    ///   - address: An email address or a phone number (`LookupInfo.init(emailAddress:)`,
    ///     `LookupInfo.init(phoneNumber:)`), compared as lookups compare them.
    ///   - containerIdentifier: The container whose invitations went to it.
    ///   - requestedBy: Who asked, recorded as the event's actor (a role or ticket reference).
    /// - Returns: Whether anything readable was sealed to the address when asked (and is erased now).
    /// - Throws: `LedgerError.Code.invalidArguments` for a lookup by user record id, or for the
    ///   address of a registered user (forget that user with ``forget(user:in:requestedBy:)``, which
    ///   takes their addresses with them); `LedgerError.Code.readOnly` without a writable key store;
    ///   `LedgerError.Code.storageFailure` when the key store cannot be rewritten (the event is
    ///   committed then: run forget again).
    @discardableResult
    public func forget(address: LookupInfo, in containerIdentifier: String, requestedBy: String = "operator")
        async throws(LedgerError) -> Bool
    {
        try Decider.checkUserName(requestedBy)
        guard let vault = models.vault, vault.writable else {
            throw LedgerError(.readOnly, "the ledger has no key store open for writing; open it for writing to forget an address")
        }
        guard let hash = models.addressHash(containerIdentifier, of: PBLookupInfo(address)), address.userRecordID == nil else {
            throw LedgerError(
                .invalidArguments, "forgetting an address needs one email address or one phone number; forget a user by "
                    + "their user record name instead")
        }
        let held = vault.hasKey(container: containerIdentifier, user: hash.subject)
        _ = try await container(containerIdentifier, userRecordName: requestedBy).runOne(.forgetAddress(address))
        try destroyKeys(ofForgotten: [hash], in: containerIdentifier)
        dropKeptAnswers()
        return held
    }

    /// Destroys the keys of those of `addresses` the read models say are forgotten (an address sealed
    /// to again since keeps its new key), and the key of `user` if given, with one rewrite of the key
    /// file.
    private func destroyKeys(ofForgotten addresses: [AddressHash], in containerIdentifier: String, with user: String? = nil)
        throws(LedgerError)
    {
        guard let vault = models.vault else { return }
        let forgotten =
            addresses.isEmpty
            ? []
            : try read("reading which addresses are forgotten") { txn in
                try addresses.filter { try models.forgottenAddress(txn, containerIdentifier, $0) != nil }
            }
        let subjects = (user.map { [$0] } ?? []) + forgotten.map(\.subject)
        try Self.destroyKeys(subjects.map { (containerIdentifier, $0) }, vault: vault, log: log)
    }

    /// Destroys the keys of `people` (``PersonalDataVault/destroy(_:)``) inside a write transaction
    /// of the log, so that no process appends a key meanwhile, and moves the count of destructions
    /// recorded in `meta` (``PersonalDataVault/Witness``): that commit is what tells every other
    /// process reading the ledger to read the key store again and drop the answers it keeps, before
    /// this returns.
    static func destroyKeys(_ people: [(container: String, user: String)], vault: PersonalDataVault, log: EventLog)
        throws(LedgerError)
    {
        guard !people.isEmpty else { return }
        let meta = log.store.meta
        var destroyedAny = false
        do {
            try log.store.environment.write { txn in
                // Run again when the environment retries: the keys are gone already then.
                if try vault.destroy(people) > 0 { destroyedAny = true }
                guard destroyedAny else { return }
                let recorded = try txn.get(meta, key: PersonalDataVault.Witness.metaKey).flatMap(PersonalDataVault.Witness.init)
                let witness = PersonalDataVault.Witness(
                    serial: max(recorded?.serial ?? 0, vault.serial), destroyed: (recorded?.destroyed ?? 0) &+ 1)
                try txn.put(meta, key: PersonalDataVault.Witness.metaKey, value: witness.bytes)
            }
        } catch {
            throw log.namingTheFile(LedgerError.wrap(error, while: "destroying the keys of forgotten personal data"))
        }
    }

    /// Kept metadata answers may name a forgotten person: rows changed without any share's tag
    /// changing, so every kept answer is dropped (as after maintenance work: a new generation).
    func dropKeptAnswers() { store.dropKeptAnswers() }

    /// After events another ledger wrote were committed here (a replica's batch, an import) that
    /// include a ``DomainEvent/personalDataForgotten(_:)``: destroys the keys those forgets made
    /// useless in this ledger's own key store (a copy of the primary's, for a replica that must read
    /// personal data), as the primary's `forget` destroyed its own, and drops kept answers. A crash
    /// before this finishes is finished by the next open for writing.
    package func finishForgets(among events: some Sequence<DomainEvent?>) throws(LedgerError) {
        guard events.contains(where: { if case .personalDataForgotten? = $0 { true } else { false } }) else { return }
        try Self.destroyKeysOfForgottenUsers(log)
        dropKeptAnswers()
    }

    /// Destroys the key of every user and address the read models say is forgotten: finishes a forget
    /// that crashed between its commit and the keys' destruction. One point read per key.
    package static func destroyKeysOfForgottenUsers(_ log: EventLog) throws(LedgerError) {
        let models = log.store.models
        guard let vault = models.vault, vault.writable else { return }
        let people = vault.people()
        guard !people.isEmpty else { return }
        let forgotten = try log.read("looking for forgotten users whose key survived") { txn in
            try people.filter { person in
                if let address = AddressHash(subject: person.user) {
                    return try models.forgottenAddress(txn, person.container, address) != nil
                }
                return try models.user(txn, person.container, person.user).map { $0.forgottenAtMicros != 0 } ?? false
            }
        }
        try destroyKeys(forgotten.map { ($0.container, $0.user) }, vault: vault, log: log)
    }
}

extension ShareLedger {
    /// Whether user `userRecordName` of `containerIdentifier` was forgotten
    /// (``forget(user:in:requestedBy:)``): a server stops accepting credentials that name such a
    /// user. `false` for a user who was never registered (or a name that cannot be one). One short
    /// read, as current as the ledger's other reads.
    public func isForgotten(user userRecordName: String, in containerIdentifier: String) throws(LedgerError) -> Bool {
        guard (try? Decider.checkUserName(userRecordName)) != nil else { return false }
        return try read("reading whether a user was forgotten") { txn in
            (try models.user(txn, containerIdentifier, userRecordName)?.forgottenAtMicros ?? 0) != 0
        }
    }
}

extension ShareLedger {
    /// Gives the ledger at `path` a new key store when its own is lost for good: missing, emptied,
    /// cut or damaged, with no backup to restore. Opening the ledger works again; everything sealed
    /// under the lost keys (emails, phone numbers, names, titles, invitation addresses) answers as
    /// erased, as if each person had been forgotten, and users can no longer be found by email or
    /// phone until they register again. The lost file, when there is one, is kept beside it as
    /// `personal-data.keys.lost-<seconds since 1970>`.
    ///
    /// Restore `personal-data.keys` from its backup instead whenever there is one: a new store cannot
    /// be undone (what is sealed from then on is sealed under keys the old file never held). Run it
    /// with no process using the ledger.
    ///
    /// - Parameters:
    ///   - path: The ledger directory.
    ///   - randomSource: Where the new lookup key comes from.
    /// - Returns: Where the lost file was moved, or nil when there was none.
    /// - Throws: `LedgerError.Code.invalidArguments` when the key store is intact (nothing is
    ///   lost: nothing changes); the errors of opening the log (`LedgerError.Code.notALedger`, …);
    ///   `LedgerError.Code.storageFailure` when the files cannot be moved or written.
    public static func replaceLostKeyStore(at path: String, randomSource: any LedgerRandomSource = SystemRandomSource())
        async throws(LedgerError) -> String?
    {
        let log = try EventLog.open(ReadModels.ledgerConfiguration(EventLog.Configuration(path: path, createIfMissing: false)))
        let result: Result<String?, LedgerError>
        do {
            let meta = log.store.meta
            let witness = try log.read("reading what the log needs of the key store") { txn in
                try txn.get(meta, key: PersonalDataVault.Witness.metaKey).flatMap(PersonalDataVault.Witness.init)
            }
            result = .success(try PersonalDataVault.replaceLost(directory: path, witness: witness, random: randomSource))
        } catch {
            result = .failure(error)
        }
        await log.close()
        return try result.get()
    }
}
