import EventLog
import Foundation

extension ShareLedger {
    /// The key store's file in the ledger directory (`docs/log-format.md`, "Key store"): the keys
    /// that seal personal data. Back it up with the ledger; a new ledger directory may hold a copy
    /// before its first open (to import an export whose personal data should stay readable).
    public static let keyStoreFileName = PersonalDataVault.fileName

    /// Carries out an erasure request (GDPR art. 17): forgets the personal data (email address,
    /// phone number, name) of user `userRecordName` in `containerIdentifier` by crypto-shredding.
    ///
    /// In one committed step it appends `PersonalDataForgotten` (the requester is the envelope's
    /// actor, the time its recorded-at; no personal data) and marks the user's row as erased,
    /// removing its lookup entries; then it destroys the user's key in the key store, which makes
    /// every box sealed under it unreadable: in the log, in exports, in backups of the log. The hash
    /// chain covers the ciphertext, so `verify` and `audit` stay clean.
    ///
    /// Forgetting is idempotent: forgetting a forgotten user succeeds, appends nothing and destroys
    /// the key if a crash left it behind (``open(_:)`` does that too for every forgotten user).
    ///
    /// - Parameters:
    ///   - userRecordName: The user to forget.
    ///   - containerIdentifier: The container the user is registered in.
    ///   - requestedBy: Who asked, recorded as the event's actor: a role or ticket reference such as
    ///     `operator` or `dsr-1234`, never a person's name or email (it is not erased).
    /// - Returns: The user's identity, now with ``UserIdentity/personalDataErased`` set.
    /// - Throws: ``LedgerError/Code/unknownItem`` when the user is not registered there,
    ///   ``LedgerError/Code/invalidArguments`` for a malformed name, ``LedgerError/Code/storageFailure``
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
        let output = try await container(containerIdentifier, userRecordName: requestedBy).runOne(
            .forgetUser(name: userRecordName))
        guard case .user(var identity) = output else { throw LedgerError.unexpectedOutput("forget") }
        // After the commit: a crash before this line leaves a forgotten user whose key survives, which
        // the next open (or the next forget) destroys.
        try models.vault?.destroy(container: containerIdentifier, user: userRecordName)
        // Kept metadata answers may name the user: a user row changed without any share's tag
        // changing, so every kept answer is dropped (as after maintenance work: a new generation).
        shareTags.committed(0, appended: false, tokens: [], everything: true)
        metadataCache?.removeAll()
        identity.personalDataErased = true
        return identity
    }

    /// Destroys the key of every user the read models say is forgotten: finishes a forget that
    /// crashed between its commit and the key's destruction. One point read per key.
    static func destroyKeysOfForgottenUsers(_ log: EventLog) throws(LedgerError) {
        let models = log.store.models
        guard let vault = models.vault, vault.writable else { return }
        let people = vault.people()
        guard !people.isEmpty else { return }
        let forgotten = try log.read("looking for forgotten users whose key survived") { txn in
            try people.filter { person in
                try models.user(txn, person.container, person.user).map { $0.forgottenAtMicros != 0 } ?? false
            }
        }
        for person in forgotten { try vault.destroy(container: person.container, user: person.user) }
    }
}
