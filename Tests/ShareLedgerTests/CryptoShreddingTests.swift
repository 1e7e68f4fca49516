import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import TestSupport
import Testing

/// Crypto-shredding (docs/operations.md, "Handling an erasure request"): registrations' personal
/// fields are sealed under a per-user key; `forget` destroys the key, after which the data is
/// nowhere readable while the chain, the audit and the rebuild stay clean.
@Suite("Crypto-shredding: forgetting a user's personal data")
struct CryptoShreddingTests {
    static let container = SharingFixture.container
    static let email = "dana.quillfeather@example.org"
    static let phone = "+44 20 7946 0958"
    static let given = "Danaerys"
    static let family = "Quillfeather"
    static let secrets = [email, phone, given, family]

    /// The spellings of the secrets a byte scan looks for: as given, lowercased, and the phone's digits.
    static let needles: [[UInt8]] = needles(for: secrets)

    /// The spellings of `secrets` a byte scan looks for: as given, lowercased, and, for a phone
    /// number (one that starts with `+`), its digits.
    static func needles(for secrets: [String]) -> [[UInt8]] {
        secrets.flatMap { secret -> [[UInt8]] in
            var out = [Array(secret.utf8), Array(secret.lowercased().utf8)]
            if secret.hasPrefix("+") { out.append(Array(secret.filter(\.isNumber).utf8)) }
            return out
        }
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count, let first = needle.first else { return false }
        var index = 0
        while index <= haystack.count - needle.count {
            if haystack[index] == first && Array(haystack[index..<(index + needle.count)]) == needle { return true }
            index += 1
        }
        return false
    }

    /// The secrets found in the bytes of any file under `directory`, with the file's name.
    static func plaintextFound(under directory: String, needles: [[UInt8]] = needles) -> [String] {
        var found: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let name = enumerator?.nextObject() as? String {
            let path = (directory as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            let bytes = Array(data)
            for (index, needle) in needles.enumerated() where contains(bytes, needle) {
                found.append("\(name): needle \(index)")
            }
        }
        return found
    }

    /// The fixture's ledger plus _dana (email, phone, name), who owns a shared zone and joined a share
    /// of alice's by her user record name.
    static func ledgerWithDana(_ label: String = #function) async throws -> (SharingFixture, Share, diary: URL) {
        let f = try await SharingFixture(label)
        var names = PersonNameComponents()
        names.givenName = given
        names.familyName = family
        try await f.ledger.registerUser("_dana", in: container, emailAddress: email, phoneNumber: phone, nameComponents: names)
        let share = try await f.makeHierarchy()
        let dana = f.as_("_dana")
        _ = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_dana")), permission: .readOnly, to: share.url)
        _ = try await dana.accept(try await dana.shareMetadata(for: share.url))
        try await f.ledger.completeResidualTasks()
        let zone = RecordZoneID(zoneName: "Diary")
        _ = try await dana.save(RecordZone(zoneID: zone))
        _ = try await dana.save(Record(recordType: "Entry", recordID: RecordID(recordName: "day1", zoneID: zone)))
        let diary = try await dana.share(rootRecord: RecordID(recordName: "day1", zoneID: zone), title: "\(given)'s diary")
        return (f, share, diary.url)
    }

    static func identity(_ f: SharingFixture, _ user: String) throws -> UserIdentity? {
        try f.ledger.read("test") { txn in try f.ledger.presenter.identity(txn, container, user: user) }
    }

    @Test("sealed from the start: the ledger directory never holds the email, phone or name in plaintext, yet answers show them and email lookups find the user")
    func sealedFromTheStart() async throws {
        let (f, share, diary) = try await Self.ledgerWithDana()
        #expect(Self.plaintextFound(under: f.dir.child("ledger")).isEmpty, "\(Self.plaintextFound(under: f.dir.child("ledger")))")
        let dana = try #require(try Self.identity(f, "_dana"))
        #expect(dana.nameComponents?.givenName == Self.given && dana.nameComponents?.familyName == Self.family)
        #expect(dana.personalDataErased == nil)
        #expect(try f.as_("_dana").share(for: diary).title == "\(Self.given)'s diary")
        #expect(try f.alice.userIdentity(forEmailAddress: "  DANA.Quillfeather@example.org ")?.userRecordID?.recordName == "_dana")
        // Inviting by email still finds the account (by the keyed hash).
        let byEmail = try await f.alice.shareParticipant(for: LookupInfo(emailAddress: Self.email))
        #expect(byEmail.userIdentity.userRecordID?.recordName == "_dana")
        // Registering the same email again is refused, by hash too.
        #expect(await errorCode { try await f.ledger.registerUser("_copy", in: Self.container, emailAddress: Self.email) } == .invalidArguments)
        _ = share
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch")).ok)
        await f.ledger.close()
    }

    @Test("after forget: answers say erased, lookups fail, history records it, audit/verify/rebuild pass, export and every file hold no plaintext, others unaffected, forgetting again changes nothing")
    func forget() async throws {
        let (f, share, diary) = try await Self.ledgerWithDana()
        let identity = try await f.ledger.forget(user: "_dana", in: Self.container, requestedBy: "dsr-0001")
        #expect(identity.personalDataErased == true && identity.nameComponents == nil)
        let vault = try #require(f.ledger.models.vault)
        #expect(!vault.hasKey(container: Self.container, user: "_dana"))
        #expect(vault.hasKey(container: Self.container, user: "_bob"))

        // Answers.
        let dana = try #require(try Self.identity(f, "_dana"))
        #expect(dana.personalDataErased == true && dana.nameComponents == nil)
        #expect(try f.alice.userIdentity(forEmailAddress: Self.email) == nil)
        let seen = try f.alice.share(for: share.url)
        let participant = try #require(seen.participants.first { $0.userIdentity.userRecordID?.recordName == "_dana" })
        #expect(participant.userIdentity.personalDataErased == true)
        let history = try LedgerAudit(f.ledger).history(of: .user("_dana", container: Self.container))
        let last = try #require(history.last)
        #expect(last.name == "PersonalDataForgotten" && last.envelope.actor == "dsr-0001")
        #expect(history.first { $0.name == "UserRegistered" }?.personalDataErased == true)
        #expect(history.allSatisfy { entry in
            Self.needles.allSatisfy { needle in !Self.contains(Array((entry.summary + entry.payloadJSON).utf8), needle) }
        })

        // Dana's share title was sealed under her key: erased too; alice's is not.
        #expect(try f.as_("_dana").share(for: diary).title == nil)
        #expect(try f.alice.share(for: share.url).title == "Groceries")

        // Others are unaffected.
        #expect(try f.alice.userIdentity(forEmailAddress: "bob@example.com")?.userRecordID?.recordName == "_bob")
        #expect(try Self.identity(f, "_bob")?.personalDataErased == nil)

        // The email can belong to someone new now.
        try await f.ledger.registerUser("_erin", in: Self.container, emailAddress: Self.email)
        #expect(try f.alice.userIdentity(forEmailAddress: Self.email)?.userRecordID?.recordName == "_erin")

        // Idempotent: nothing appended, no error.
        let head = try f.ledger.statistics().events
        let again = try await f.ledger.forget(user: "_dana", in: Self.container)
        #expect(again.personalDataErased == true)
        #expect(try f.ledger.statistics().events == head)
        #expect(await errorCode { try await f.ledger.forget(user: "_nobody", in: Self.container) } == .unknownItem)

        // Audit, verify and a rebuild agree.
        let report = try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch"))
        #expect(report.ok, "\(report.problems) \(report.projectionDifferences)")
        #expect(try f.ledger.log.verifyChain().isValid)
        _ = try await LedgerAudit(f.ledger).rebuildReadModels()
        #expect(try Self.identity(f, "_dana")?.personalDataErased == true)
        #expect(try f.alice.userIdentity(forEmailAddress: "bob@example.com")?.userRecordID?.recordName == "_bob")
        #expect(try LedgerAudit(f.ledger).audit(scratchPath: f.dir.child("scratch2")).ok)

        // Export: ciphertext only.
        let exportPath = f.dir.child("export.ndjson")
        _ = FileManager.default.createFile(atPath: exportPath, contents: nil)
        let handle = try #require(FileHandle(forWritingAtPath: exportPath))
        _ = try LedgerAudit(f.ledger).export(to: handle)
        try handle.close()
        #expect(Self.plaintextFound(under: f.dir.path).isEmpty, "\(Self.plaintextFound(under: f.dir.path))")

        // Import into a new ledger with a copy of the key store: still erased, bob still readable.
        // The key store is copied into the new, empty directory before the ledger is made there.
        let imported = try await importWithKeys(exportPath, keysFrom: f.dir.child("ledger"), into: f.dir.child("imported"))
        let importedDana = try imported.read("test") { txn in try imported.presenter.identity(txn, Self.container, user: "_dana") }
        #expect(importedDana.personalDataErased == true)
        #expect(
            try imported.container(Self.container, userRecordName: "_alice").userIdentity(forEmailAddress: "bob@example.com")?
                .userRecordID?.recordName == "_bob")
        #expect(try LedgerAudit(imported).audit(scratchPath: f.dir.child("scratch3")).ok)
        await imported.close()
        #expect(Self.plaintextFound(under: f.dir.path).isEmpty, "\(Self.plaintextFound(under: f.dir.path))")
        await f.ledger.close()
    }

    @Test("a forget that crashed after its commit, before the key was destroyed, is finished when the ledger opens again")
    func crashBetweenCommitAndKeyDestruction() async throws {
        let (f, _, _) = try await Self.ledgerWithDana()
        let keyFile = f.dir.child("ledger") + "/" + PersonalDataVault.fileName
        let before = try #require(FileManager.default.contents(atPath: keyFile))
        try await f.ledger.forget(user: "_dana", in: Self.container)
        await f.ledger.close()
        // The state a crash right after the commit leaves: the event committed, the old key file.
        try before.write(to: URL(fileURLWithPath: keyFile))
        let reopened = try PersonalDataVault.load(directory: f.dir.child("ledger"), writable: false, random: SeededRandom(seed: 1))
        #expect(reopened.hasKey(container: Self.container, user: "_dana"))
        var configuration = ShareLedger.Configuration(path: f.dir.child("ledger"), durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        #expect(ledger.models.vault?.hasKey(container: Self.container, user: "_dana") == false)
        #expect(ledger.models.vault?.hasKey(container: Self.container, user: "_bob") == true)
        #expect(Self.plaintextFound(under: f.dir.child("ledger")).isEmpty)
        await ledger.close()
    }

    @Test("a replica and an import holding a copy of the key store taken before the forget destroy the forgotten keys when the forget arrives")
    func forgetReachesCopiesOfTheKeyStore() async throws {
        let (f, share, _) = try await Self.ledgerWithDana()
        let outsider = "zed.outsider@example.net"
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: outsider), permission: .readOnly, to: share.url)
        let source = f.dir.child("ledger")
        func withKeyCopy(_ name: String) throws -> String {
            let path = f.dir.child(name)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                atPath: source + "/" + PersonalDataVault.fileName, toPath: path + "/" + PersonalDataVault.fileName)
            return path
        }
        func open(_ path: String) throws -> ShareLedger {
            var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
            configuration.residualTaskWorker = nil
            return try ShareLedger.open(configuration)
        }
        func people(_ ledger: ShareLedger) throws -> Set<String> {
            Set(try #require(ledger.models.vault).people().map { $0.container + "/" + $0.user })
        }
        let replica = try open(try withKeyCopy("replica"))
        let importPath = try withKeyCopy("imported")
        let before = try f.ledger.log.storedEvents(after: .start, limit: 100_000)
        try await replica.applyReplicated(before)
        let readable = try replica.read("test") { txn in try replica.presenter.identity(txn, Self.container, user: "_dana") }
        #expect(readable.nameComponents?.givenName == Self.given, "the copied key store opens the replica's boxes")
        let held = try people(replica)

        try await f.ledger.forget(user: "_dana", in: Self.container, requestedBy: "dsr-7")
        #expect(try await f.ledger.forget(address: LookupInfo(emailAddress: outsider), in: Self.container, requestedBy: "dsr-8"))
        let destroyed = held.subtracting(try people(f.ledger))
        #expect(destroyed.contains(Self.container + "/_dana") && destroyed.contains { $0.contains("/#E") }, "\(destroyed)")

        // The replica: the rest of the log, in one batch.
        let rest = try f.ledger.log.storedEvents(after: try #require(before.last).position, limit: 100_000)
        try await replica.applyReplicated(rest)
        #expect(try people(replica) == people(f.ledger))
        let erased = try replica.read("test") { txn in try replica.presenter.identity(txn, Self.container, user: "_dana") }
        #expect(erased.personalDataErased == true && erased.nameComponents == nil)
        #expect(try replica.readModelDigest().digest == f.ledger.readModelDigest().digest)
        await replica.close()

        // An import of the whole export, into a directory whose key store was copied before the forget.
        let exportPath = f.dir.child("export.ndjson")
        _ = FileManager.default.createFile(atPath: exportPath, contents: nil)
        let handle = try #require(FileHandle(forWritingAtPath: exportPath))
        _ = try LedgerAudit(f.ledger).export(to: handle)
        try handle.close()
        let imported = try open(importPath)
        let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: exportPath))
        _ = try await LedgerAudit(imported).importLog(from: input)
        try input.close()
        #expect(try people(imported) == people(f.ledger))
        let importedDana = try imported.read("test") { txn in try imported.presenter.identity(txn, Self.container, user: "_dana") }
        #expect(importedDana.personalDataErased == true)
        #expect(try LedgerAudit(imported).audit(scratchPath: f.dir.child("scratch")).ok)
        await imported.close()
        await f.ledger.close()
    }

    @Test("a damaged key store is a typed error, never a trap; a record torn by a crash while appending is cut off by the next append")
    func damagedKeyStore() throws {
        let dir = TemporaryDirectory()
        let random = SeededRandom(seed: 9)
        let vault = try PersonalDataVault.load(directory: dir.path, writable: true, random: random)
        _ = try vault.key(container: "c", user: "_a", create: true)
        _ = try vault.key(container: "c", user: "_b", create: true)
        let path = dir.child(PersonalDataVault.fileName)
        let good = try #require(FileManager.default.contents(atPath: path))

        // Torn last record: the keys before it load, the file stays as it is until the next append
        // cuts the torn record off.
        let tornBytes = good + Data([2, 0, 3, 0x41])
        try tornBytes.write(to: URL(fileURLWithPath: path))
        let torn = try PersonalDataVault.load(directory: dir.path, writable: true, random: random)
        #expect(torn.hasKey(container: "c", user: "_a") && torn.hasKey(container: "c", user: "_b"))
        #expect(FileManager.default.contents(atPath: path) == tornBytes)
        _ = try torn.key(container: "c", user: "_c", create: true)
        let appended = try #require(FileManager.default.contents(atPath: path))
        #expect(appended.prefix(good.count) == good && appended.count == good.count + 43)
        let reloaded = try PersonalDataVault.load(directory: dir.path, writable: false, random: random)
        #expect(reloaded.hasKey(container: "c", user: "_c") && reloaded.serial == torn.serial)
        try good.write(to: URL(fileURLWithPath: path))

        // Flipped bytes anywhere, garbage, another file: corruptedData.
        for damage in [
            Data(good.enumerated().map { $0.offset == good.count - 10 ? $0.element ^ 0xFF : $0.element }),
            Data(good.enumerated().map { $0.offset == 12 ? 0x7F : $0.element }),
            Data("not a key store at all".utf8),
            Data(good.prefix(8)) + Data([9, 0, 0]) + Data(repeating: 0, count: 40),
        ] {
            try damage.write(to: URL(fileURLWithPath: path))
            #expect(throws: LedgerError.self) { _ = try PersonalDataVault.load(directory: dir.path, writable: false, random: random) }
            do {
                _ = try PersonalDataVault.load(directory: dir.path, writable: false, random: random)
            } catch {
                #expect(error.code == .corruptedData)
                #expect(error.message.contains("key store"))
            }
        }
    }

    @Test("an opened box is kept for the next answer, and no longer opens once its key is destroyed")
    func openedBoxesGoWithTheKey() throws {
        let dir = TemporaryDirectory()
        let vault = try PersonalDataVault.load(directory: dir.path, writable: true, random: SeededRandom(seed: 9))
        var fields = Shareledger_Events_V1_PersonalFields()
        fields.emailAddress = "kept@example.com"
        let sealed = try vault.seal(fields, container: "c", subject: "_a")
        let other = try vault.seal(fields, container: "c", subject: "_b")
        #expect(vault.open(sealed, container: "c") == fields)
        #expect(vault.open(sealed, container: "c") == fields, "the second open is answered from memory")
        #expect(vault.open(other, container: "c") == fields)
        #expect(vault.open(sealed, container: "other") == nil, "another container's associated data does not open it")
        #expect(try vault.destroy(container: "c", user: "_a"))
        #expect(vault.open(sealed, container: "c") == nil)
        #expect(vault.open(other, container: "c") == fields)
    }

    @Test("a presented identity is kept while its row and the keys are unchanged, and is built again once the key is destroyed, the row untouched")
    func keptIdentitiesGoWithTheKey() async throws {
        let (f, share, _) = try await Self.ledgerWithDana()
        let before = try #require(try Self.identity(f, "_dana"))
        #expect(before.nameComponents?.givenName == Self.given && before.personalDataErased == nil)
        #expect(f.ledger.store.identities.count > 0, "the answers above kept identities")
        #expect(try Self.identity(f, "_dana") == before, "the kept identity answers the same")
        // The key goes without any commit touching Dana's row (as a key store another process cut).
        let vault = try #require(f.ledger.models.vault)
        #expect(try vault.destroy(container: Self.container, user: "_dana"))
        let after = try #require(try Self.identity(f, "_dana"))
        #expect(after.personalDataErased == true && after.nameComponents == nil)
        let seen = try f.alice.share(for: share.url)
        let participant = try #require(seen.participants.first { $0.userIdentity.userRecordID?.recordName == "_dana" })
        #expect(participant.userIdentity.personalDataErased == true && participant.userIdentity.nameComponents == nil)
        await f.ledger.close()
    }

    @Test("the identity cache answers only for the same row bytes and key store generation")
    func identityCacheValidators() {
        let cache = IdentityCache(capacity: 4, shards: 2)
        let key = IdentityCache.Key(bytes: Array("c\u{0}_dana\u{0}".utf8))
        var identity = UserIdentity(
            userRecordID: RecordID(userRecordName: "_dana"), lookupInfo: nil, nameComponents: nil, hasiCloudAccount: true)
        identity.personalDataErased = true
        let row: [UInt8] = [1, 2, 3]
        row.withUnsafeBytes { cache.keep(key, row: $0, generation: 7, identity) }
        #expect(row.withUnsafeBytes { cache.value(key, row: $0, generation: 7) } == identity)
        #expect(row.withUnsafeBytes { cache.value(key, row: $0, generation: 8) } == nil, "keys went since")
        #expect([UInt8]([1, 2, 4]).withUnsafeBytes { cache.value(key, row: $0, generation: 7) } == nil, "another row")
        #expect([UInt8]([1, 2]).withUnsafeBytes { cache.value(key, row: $0, generation: 7) } == nil, "a shorter row")
        #expect(row.withUnsafeBytes { cache.value(IdentityCache.Key(bytes: [9]), row: $0, generation: 7) } == nil)
        for index in 0..<16 { row.withUnsafeBytes { cache.keep(IdentityCache.Key(bytes: [UInt8(index)]), row: $0, generation: 7, identity) } }
        #expect(cache.count <= 4, "bounded by its capacity")
        cache.removeAll()
        #expect(cache.count == 0)
    }

    @Test("keys come from the injected random source: the same seed gives the same key store")
    func deterministic() throws {
        let dirs = [TemporaryDirectory("deterministic-1"), TemporaryDirectory("deterministic-2")]
        var files: [Data] = []
        for dir in dirs {
            let vault = try PersonalDataVault.load(directory: dir.path, writable: true, random: SeededRandom(seed: 5))
            _ = try vault.key(container: "c", user: "_a", create: true)
            files.append(try #require(FileManager.default.contents(atPath: dir.child(PersonalDataVault.fileName))))
        }
        #expect(files[0] == files[1] && files[0].count == 106)
    }

    @Test("audit counts events holding personal data in plaintext: the release fixture's registrations, not sealed ones")
    func auditCountsPlaintext() async throws {
        let dir = TemporaryDirectory()
        let path = try ReleaseFixtureTests.copy(dir)
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: false, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        let before = try LedgerAudit(ledger).audit(scratchPath: dir.child("audit"))
        #expect(before.ok && before.eventsWithPlaintextPersonalData > 0)
        try await ledger.registerUser("_new", in: "iCloud.com.example.sim.notes", emailAddress: "new@example.com")
        let after = try LedgerAudit(ledger).audit(scratchPath: dir.child("audit2"))
        #expect(after.ok && after.eventsWithPlaintextPersonalData == before.eventsWithPlaintextPersonalData)
        await ledger.close()
    }

    @Test("share-ledger forget: exit 0 (twice), then audit, verify and export hold no plaintext of the forgotten user; the other user is unaffected")
    func forgetCommand() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let register = try await runCLI([
            "user", "register", "_dana", "--container", Self.container, "--email", Self.email, "--phone", Self.phone, "--path", path,
        ])
        #expect(register.exited(0), "\(register.summary)")
        #expect(try await runCLI(["user", "register", "_bob", "--container", Self.container, "--email", "bob@example.com", "--path", path]).exited(0))
        for _ in 0..<2 {
            let forget = try await runCLI([
                "forget", "--user", "_dana", "--container", Self.container, "--requested-by", "dsr-9", "--path", path, "--json",
            ])
            #expect(forget.exited(0) && forget.stdout.contains("personalDataErased"), "\(forget.summary)")
        }
        let unknown = try await runCLI(["forget", "--user", "_nobody", "--container", Self.container, "--path", path])
        #expect(unknown.exited(1), "\(unknown.summary)")
        let audit = try await runCLI(["audit", "--path", path])
        #expect(audit.exited(0) && !audit.stdout.contains("plaintext"), "\(audit.summary)")
        #expect(try await runCLI(["verify", "--path", path]).exited(0))
        let export = try await runCLI(["export", "--path", path])
        #expect(export.exited(0) && export.stdout.contains("PersonalDataForgotten"))
        let exported = Array(export.stdout.utf8)
        #expect(Self.needles.allSatisfy { !Self.contains(exported, $0) })
        #expect(Self.plaintextFound(under: path).isEmpty, "\(Self.plaintextFound(under: path))")
        if let python = await pythonWithLMDB() {
            let run = try await runProcess(
                URL(fileURLWithPath: "/usr/bin/env"), [python, packageRoot.appendingPathComponent("scripts/verify_chain.py").path, path])
            #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        }
        var configuration = ShareLedger.Configuration(path: path, readOnly: true)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        #expect(try ledger.container(Self.container, userRecordName: "_bob").userIdentity(forEmailAddress: "bob@example.com") != nil)
        #expect(try ledger.container(Self.container, userRecordName: "_bob").userIdentity(forEmailAddress: Self.email) == nil)
        await ledger.close()
    }
}
