import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import Synchronization
import TestSupport
import Testing

/// The rule of docs/operations.md ("Logs, metrics and error messages: no personal data"): no email
/// address, phone number, name, title or other typed text in an error message or a log line, while
/// identifiers (user record names, containers, URLs) stay.
@Suite("No personal data in messages and logs")
struct PersonalDataTests {
    // MARK: - Scanning

    /// The spellings of `secret` a leak could take: as given, lowercased, and for a phone number its
    /// digits.
    static func spellings(_ secret: String) -> [String] {
        var out = [secret, secret.lowercased()]
        let digits = secret.filter { $0.isASCII && $0.isNumber }
        if digits.count >= 6 && !secret.contains("@") { out.append(digits) }
        return out
    }

    /// The personal values of `secrets` that `text` contains (case-insensitively, and phones by digits too).
    static func leaks(in text: String, of secrets: [String]) -> [String] {
        let lowered = text.lowercased()
        let digitsOnly = text.filter { $0.isASCII && $0.isNumber }
        return secrets.filter { secret in
            spellings(secret).contains { spelling in
                spelling.allSatisfy({ $0.isASCII && $0.isNumber }) ? digitsOnly.contains(spelling) || text.contains(spelling)
                    : lowered.contains(spelling.lowercased())
            }
        }
    }

    /// Whether `text` holds `word` with no letter or digit right before or after it (a name inside a random
    /// token such as `7Ben3` is not the name).
    static func containsWord(_ text: String, _ word: String) -> Bool {
        var rest = text[...]
        while let range = rest.range(of: word) {
            let before = range.lowerBound == text.startIndex ? nil : text[text.index(before: range.lowerBound)]
            let after = range.upperBound == text.endIndex ? nil : text[range.upperBound]
            let isWordCharacter = { (c: Character?) in c.map { $0.isLetter || $0.isNumber } ?? false }
            if !isWordCharacter(before) && !isWordCharacter(after) { return true }
            rest = text[range.upperBound...]
        }
        return false
    }

    /// Every text of `error` a caller or a log may show: message, description, underlying error,
    /// and each partial error with its key.
    static func texts(_ error: LedgerError) -> [String] {
        var out = [error.message, error.description, "\(error)", error.underlying ?? ""]
        for (key, item) in error.partialErrors { out += [key] + texts(item) }
        return out
    }

    /// Records an issue for each secret that one of `error`'s texts contains.
    static func expectClean(_ error: LedgerError?, _ secrets: [String], _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let error else {
            Issue.record("\(what): no error", sourceLocation: sourceLocation)
            return
        }
        for text in texts(error) {
            let found = leaks(in: text, of: secrets)
            #expect(found.isEmpty, "\(what): \(found) in \"\(text)\"", sourceLocation: sourceLocation)
        }
        #expect(!error.message.isEmpty, "\(what): the message must still say what failed", sourceLocation: sourceLocation)
    }

    /// The error `body` fails with, or nil.
    static func failure<T>(_ body: () async throws -> T) async -> LedgerError? {
        do {
            _ = try await body()
            return nil
        } catch let error as LedgerError {
            return error
        } catch {
            return LedgerError(.storageFailure, "not a LedgerError: \(error)")
        }
    }

    // MARK: - The placeholder

    @Test("redact: a placeholder with the kind, stable for equal values, different for others, never the value")
    func placeholder() {
        let email = PersonalData.redact("Alice@Example.com", as: .emailAddress)
        #expect(email.hasPrefix("<email #") && email.hasSuffix(">"), "\(email)")
        #expect(email.count == "<email #>".count + 12)
        #expect(!email.lowercased().contains("alice") && !email.contains("example"))
        #expect(PersonalData.redact(" alice@example.com", as: .emailAddress) == email, "emails compare as the ledger matches them")
        #expect(PersonalData.redact("bob@example.com", as: .emailAddress) != email)
        let phone = PersonalData.redact("+1 (555) 0100", as: .phoneNumber)
        #expect(phone.hasPrefix("<phone #"))
        #expect(PersonalData.redact("+1 555 0100", as: .phoneNumber) == phone, "phones compare by their digits")
        #expect(!phone.contains("5550100"))
        #expect(PersonalData.redact("Ada", as: .name).hasPrefix("<name #"))
        #expect(PersonalData.redact("Ada", as: .name) != PersonalData.redact("Ada", as: .text), "the kind is part of the hash")
        #expect(PersonalData.redact("", as: .emailAddress) == "<empty email>")
        #expect(LookupInfo(emailAddress: "bob@example.com").description == PersonalData.redact("bob@example.com", as: .emailAddress))
        #expect(LookupInfo(phoneNumber: "+1 555 0100").description == phone)
        #expect(LookupInfo(userRecordID: RecordID(userRecordName: "_bob")).description == "user _bob", "identifiers stay")
    }

    // MARK: - Every error path that takes personal data

    @Test("every library error path fed an email, a phone number, a name or a title: the messages name none of them")
    func libraryErrorPaths() async throws {
        let f = try await SharingFixture()
        let share = try await f.makeHierarchy(title: "Secret Birthday Plans")
        let alice = f.alice
        // An invitation no account has, so that verification applies to the share.
        _ = try await alice.addParticipant(LookupInfo(emailAddress: "dave.private@unclaimed.example"), permission: .readOnly, to: share.url)
        var names = PersonNameComponents()
        names.givenName = "Zebedee"
        names.familyName = "Quuxworth"
        names.middleName = "Ignatius"
        names.nickname = "Zeb"
        let longEmail = String(repeating: "e", count: 243) + "@example.com"
        let secrets = [
            "alice@example.com", "bob@example.com", "carol@example.com", "+1 555 0100", "+1 (555) 0100",
            "mallory-at-example.com", "call me maybe", "dave.private@unclaimed.example", "eve.private@nowhere.example",
            "frank.private@nowhere.example", "+44 20 7946 0123", "not-an-email", longEmail, "Zebedee", "Quuxworth",
            "Ignatius", "Secret Birthday Plans", "Lost Birthday Plans", "Grace's diary",
        ]
        let container = SharingFixture.container
        let ledger = f.ledger
        let cases: [(String, () async throws -> Void)] = [
            ("register with another user's email", {
                try await ledger.registerUser("_mallory", in: container, emailAddress: "ALICE@example.com", nameComponents: names)
            }),
            ("register with another user's phone", {
                try await ledger.registerUser("_mallory", in: container, phoneNumber: "+1 (555) 0100", nameComponents: names)
            }),
            ("register with a malformed email", {
                try await ledger.registerUser("_mallory", in: container, emailAddress: "mallory-at-example.com")
            }),
            ("register with an email over the limit", { try await ledger.registerUser("_mallory", in: container, emailAddress: longEmail) }),
            ("register with a malformed phone", { try await ledger.registerUser("_mallory", in: container, phoneNumber: "call me maybe") }),
            ("register with a phone over the limit", {
                try await ledger.registerUser("_mallory", in: container, phoneNumber: "+44 20 7946 0123 0123 0123 0123 0123")
            }),
            ("register twice, with names", {
                try await ledger.registerUser("_alice", in: container, emailAddress: "eve.private@nowhere.example", nameComponents: names)
            }),
            ("invite a malformed email", {
                _ = try await alice.addParticipant(LookupInfo(emailAddress: "not-an-email"), permission: .readOnly, to: share.url)
            }),
            ("invite an email over the limit", {
                _ = try await alice.addParticipant(LookupInfo(emailAddress: longEmail), permission: .readOnly, to: share.url)
            }),
            ("invite a malformed phone", {
                _ = try await alice.addParticipant(LookupInfo(phoneNumber: "x1"), permission: .readOnly, to: share.url)
            }),
            ("invite with a role nobody may give", {
                _ = try await alice.addParticipant(
                    LookupInfo(emailAddress: "eve.private@nowhere.example"), permission: .readOnly, role: .owner, to: share.url)
            }),
            ("invite to a share of someone else", {
                _ = try await f.bob.addParticipant(LookupInfo(emailAddress: "eve.private@nowhere.example"), permission: .readOnly, to: share.url)
            }),
            ("verify an address no invitation went to", {
                _ = try await f.carol.requestParticipantVerification(
                    for: share.url, lookupInfo: LookupInfo(emailAddress: "eve.private@nowhere.example"))
            }),
            ("verify a phone no invitation went to", {
                _ = try await f.carol.requestParticipantVerification(for: share.url, lookupInfo: LookupInfo(phoneNumber: "+44 20 7946 0123"))
            }),
            ("verify without an address", {
                _ = try await f.carol.requestParticipantVerification(
                    for: share.url, lookupInfo: LookupInfo(userRecordID: RecordID(userRecordName: "_carol")))
            }),
            ("verify as the owner", {
                _ = try await alice.requestParticipantVerification(
                    for: share.url, lookupInfo: LookupInfo(emailAddress: "dave.private@unclaimed.example"))
            }),
            ("a wrong verification code", { _ = try await f.carol.verifyParticipant(for: share.url, code: "0000000000WRONGCODE0000000") }),
            ("look up a malformed email", { _ = try await f.bob.shareParticipant(for: LookupInfo(emailAddress: "not-an-email")) }),
            ("look up a malformed phone", { _ = try await f.bob.shareParticipant(for: LookupInfo(phoneNumber: "x1")) }),
            ("look up without an account", {
                _ = try await f.as_(nil).shareParticipant(for: LookupInfo(emailAddress: "frank.private@nowhere.example"))
            }),
            ("look up as an unregistered user", {
                _ = try await f.as_("_nobody").shareParticipant(for: LookupInfo(phoneNumber: "+44 20 7946 0123"))
            }),
            ("look up users by email without an account", {
                _ = try f.as_(nil).userIdentity(forEmailAddress: "frank.private@nowhere.example")
            }),
            ("retitle with a stale change tag", { _ = try await alice.setTitle("Lost Birthday Plans", for: share.url, ifChangeTag: "0") }),
            ("retitle as a stranger", { _ = try await f.carol.setTitle("Lost Birthday Plans", for: share.url) }),
            ("a title over the limit", {
                _ = try await alice.setTitle("Secret Birthday Plans " + String(repeating: "t", count: 600), for: share.url)
            }),
            ("save a typed field with a stale change tag", {
                var record = try alice.record(for: SharingFixture.recordID("item"))
                record["note"] = .string("Grace's diary")
                record.recordChangeTag = "0"
                _ = try await alice.save(record)
            }),
            ("save a typed field into a record of another's zone", {
                _ = try await f.carol.save(
                    Record(recordType: "Item", recordID: SharingFixture.recordID("diary"), fields: ["note": .string("Grace's diary")]))
            }),
        ]
        for (what, call) in cases {
            Self.expectClean(await Self.failure(call), secrets, what)
        }

        // FetchShareParticipantsOperation: per-item errors and the partialFailure keyed by lookup.
        let operation = FetchShareParticipantsOperation(userIdentityLookupInfos: [
            LookupInfo(emailAddress: "not-an-email"), LookupInfo(phoneNumber: "x1"), LookupInfo(emailAddress: longEmail),
            LookupInfo(emailAddress: "bob@example.com"),
        ])
        let perItem = Mutex<[LedgerError]>([])
        let completion = Mutex<Result<Void, LedgerError>?>(nil)
        operation.perShareParticipantResultBlock = { _, result in
            if case .failure(let error) = result { perItem.withLock { $0.append(error) } }
        }
        operation.fetchShareParticipantsResultBlock = { result in completion.withLock { $0 = result } }
        f.bob.add(operation)
        await operation.waitUntilFinished()
        #expect(perItem.withLock { $0.count } == 3)
        for error in perItem.withLock({ $0 }) { Self.expectClean(error, secrets, "a lookup of the operation") }
        guard case .failure(let overall) = try #require(completion.withLock { $0 }) else {
            Issue.record("expected partialFailure")
            return
        }
        #expect(overall.code == .partialFailure)
        #expect(overall.partialErrors.count == 3)
        #expect(overall.partialErrors[LookupInfo(phoneNumber: "x1").description]?.code == .invalidArguments, "keyed by the placeholder")
        Self.expectClean(overall, secrets, "the operation's partialFailure")

        // An import whose forged line carries an email address: refused without repeating it.
        let file = try HostileStoredDataTests.export(f)
        var added = Shareledger_Events_V1_ParticipantAdded()
        added.token = share.token.text
        added.participantID = "forged"
        added.lookupInfo.emailAddress = "eve.private@nowhere.example"
        added.lookupInfo.phoneNumber = "+44 20 7946 0123"
        added.role = .privateUser
        added.permission = .readWrite
        var taken = Shareledger_Events_V1_UserRegistered()
        taken.userRecordName = "_mallory"
        taken.emailAddress = "alice@example.com"
        taken.name.givenName = "Zebedee"
        let forgeries: [(String, [UInt8])] = [
            ("a forged invitation to an email", try HostileStoredDataTests.forgedLines(f.ledger, token: share.token.text, actor: "_bob", [
                .participantAdded(added)
            ])),
            ("a forged registration with a taken email", try HostileStoredDataTests.forgedLines(f.ledger, token: share.token.text, [
                .userRegistered(taken)
            ])),
            ("a malformed line holding an email", Array("{\"position\":\"eve.private@nowhere.example\",\"actor\":\"Zebedee\"}\n".utf8)),
            ("a line that is no JSON, holding an email", Array("eve.private@nowhere.example +44 20 7946 0123\n".utf8)),
        ]
        for (index, (what, lines)) in forgeries.enumerated() {
            let dir = TemporaryDirectory()
            // The source's key store, so that the registrations it sealed are readable (and their
            // emails taken) in the target, as docs/operations.md has an import done.
            try FileManager.default.createDirectory(atPath: dir.child("ledger"), withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                atPath: f.dir.child("ledger") + "/" + PersonalDataVault.fileName,
                toPath: dir.child("ledger") + "/" + PersonalDataVault.fileName)
            let target = try HostileStoredDataTests.emptyLedger(dir)
            let bytes = index < 2 ? file + lines : lines
            let error = await Self.failure { try await HostileStoredDataTests.importing(bytes, into: target, dir, "file.ndjson") }
            #expect(error?.code == .invalidArguments, "\(what): \(String(describing: error))")
            Self.expectClean(error, secrets, what)
            await target.close()
        }
        await f.ledger.close()
    }

    // MARK: - A whole simulate --verbose run

    /// The personal values the workload's generator wrote into `path`: every registered email, phone
    /// and name, every address an invitation went to, every share title.
    static func workloadValues(_ path: String) async throws -> (emails: Set<String>, phones: Set<String>, names: Set<String>, titles: Set<String>) {
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        var emails = Set<String>(), phones = Set<String>(), names = Set<String>(), titles = Set<String>()
        func lookup(_ info: Shareledger_Events_V1_LookupInfo) {
            if !info.emailAddress.isEmpty { emails.insert(info.emailAddress) }
            if !info.phoneNumber.isEmpty { phones.insert(info.phoneNumber) }
        }
        for envelope in try ledger.log.events(after: .start, limit: .max) {
            let event = try DomainEvent.decode(
                type: envelope.eventType, schemaVersion: envelope.schemaVersion, payload: Array(envelope.payload),
                position: envelope.position.rawValue)
            switch event {
            case .userRegistered(let registered):
                // Sealed since crypto-shredding: the box opened with the ledger's key store.
                let e = try #require(ledger.models.personalFields(of: registered, container: envelope.container))
                if !e.emailAddress.isEmpty { emails.insert(e.emailAddress) }
                if !e.phoneNumber.isEmpty { phones.insert(e.phoneNumber) }
                for name in [e.name.givenName, e.name.familyName, e.name.middleName, e.name.nickname] where !name.isEmpty {
                    names.insert(name)
                }
            case .participantAdded(let e): lookup(e.lookupInfo)
            case .shareParticipantFetched(let e): lookup(e.lookupInfo)
            case .shareCreated(let e) where e.hasSealedTitle:
                titles.insert(try #require(ledger.models.vault?.open(e.sealedTitle, container: envelope.container)).title)
            case .shareTitleChanged(let e) where e.hasSealedTitle:
                titles.insert(try #require(ledger.models.vault?.open(e.sealedTitle, container: envelope.container)).title)
            case .shareCreated(let e) where !e.title.isEmpty: titles.insert(e.title)
            case .shareTitleChanged(let e) where !e.title.isEmpty: titles.insert(e.title)
            default: break
            }
        }
        await ledger.close()
        return (emails, phones, names, titles)
    }

    /// Runs the built `share-ledger` with its output going to files (a verbose run writes more than a
    /// pipe holds, and ``runProduct(_:_:)`` reads its pipes one after the other).
    static func runToFiles(_ dir: TemporaryDirectory, _ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let outPath = dir.child("stdout.txt")
        let errPath = dir.child("stderr.txt")
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        let out = try #require(FileHandle(forWritingAtPath: outPath))
        let err = try #require(FileHandle(forWritingAtPath: errPath))
        let child = try Spawned(
            builtProduct("share-ledger").path, arguments, stdout: out.fileDescriptor, stderr: err.fileDescriptor)
        try out.close()
        try err.close()
        let (status, _) = child.wait()
        return (
            status, String(decoding: try Data(contentsOf: URL(fileURLWithPath: outPath)), as: UTF8.self),
            String(decoding: try Data(contentsOf: URL(fileURLWithPath: errPath)), as: UTF8.self)
        )
    }

    @Test("simulate --verbose: neither its output nor its log of every failed call holds an email, a phone, a name or a title")
    func simulateVerbose() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        let run = try Self.runToFiles(dir, [
            "simulate", "--path", path, "--users", "30", "--clients", "3", "--actions", "3000", "--seed", "19",
            "--durability", "unsafeNoSync", "--verbose",
        ])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr.suffix(2_000))")
        let output = run.stdout + "\n" + run.stderr
        // The run logged its failed calls (so their messages were scanned), across the error paths.
        let failedCalls = run.stderr.components(separatedBy: "\n").filter { $0.contains("call failed") }
        #expect(failedCalls.count > 50, "\(run.stderr.suffix(2_000))")
        for code in ["unknownItem", "permissionFailure", "serverRecordChanged", "alreadyShared", "invalidArguments", "notAuthenticated"] {
            #expect(failedCalls.contains { $0.contains(code) }, "no failed call with \(code)")
        }

        let values = try await Self.workloadValues(path)
        #expect(values.emails.count > 10 && values.phones.count > 3 && values.names.count > 5 && values.titles.count > 3, "\(values)")
        // Emails and phones as written and as the ledger normalizes them; titles as typed.
        // (A share URL carries its title, mangled, in its fragment: look for that spelling too.)
        let titles = values.titles.flatMap { [$0, ShareURL.mangle($0)] }
        let found = Self.leaks(in: output, of: Array(values.emails) + Array(values.phones) + titles)
        #expect(found.isEmpty, "personal data in the output: \(found.prefix(10))")
        // Names are short words: look for them as words, with their capital.
        for name in values.names {
            #expect(!Self.containsWord(output, name), "the name \(name) in the output")
        }
        // No email address at all (the workload also provokes errors with addresses it never stores).
        let anyEmail = try Regex("[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+\\.[A-Za-z.]+")
        let emailLike = output.matches(of: anyEmail).map { String(output[$0.range]) }
        #expect(emailLike.isEmpty, "email addresses in the output: \(emailLike.prefix(10))")
    }
}
