import Foundation
import Synchronization
@testable import ShareLedger
import TestSupport
import Testing

/// The key store against its log: a store cut back past keys the log's committed events use
/// (cut, emptied, deleted) is `corruptedData`, never a silent loss of personal data; and a forget,
/// wherever it runs, reaches every ledger open on that directory before it returns.
@Suite("Key store: cuts are seen, forgets reach every open ledger")
struct KeyStoreIntegrityTests {
    static let container = SharingFixture.container
    static let title = "Quarterly secrets"
    static let invitee = "ivy.outsider@example.net"

    /// The fixture's ledger with sealed events of every kind: registrations, a titled share, an
    /// invitation by email (an address's key) and bob as a participant by his user record name.
    static func sealedLedger(_ label: String = #function) async throws -> (SharingFixture, Share) {
        let f = try await SharingFixture(label)
        let share = try await f.makeHierarchy(title: title)
        _ = try await f.alice.addParticipant(LookupInfo(emailAddress: invitee), permission: .readOnly, to: share.url)
        _ = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_bob")), permission: .readOnly, to: share.url)
        return (f, share)
    }

    static func open(_ path: String, readOnly: Bool = false) throws(LedgerError) -> ShareLedger {
        var configuration = ShareLedger.Configuration(path: path, createIfMissing: false, readOnly: readOnly, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        return try ShareLedger.open(configuration)
    }

    /// What `viewer` is shown of the share at `url`: its title (from a kept answer when there is one)
    /// and the invitee's email address as alice's fetch of the share presents it.
    static func shown(_ ledger: ShareLedger, _ url: URL) throws -> (title: String?, invitee: String?) {
        let metadata = try ledger.container(container, userRecordName: "_bob").shareMetadataWithoutLogging(for: url)
        let owned = try ledger.container(container, userRecordName: "_alice").ownedShares()
        let share = try #require(owned.first { $0.url.path == url.path }, "\(owned.map(\.url)) \(url)")
        let invitee = share.participants.compactMap { $0.userIdentity.lookupInfo?.emailAddress }.first { $0 == Self.invitee }
        return (metadata.share.title, invitee)
    }

    // MARK: - Item: a cut key store is seen

    @Test(
        "a key store the log needs, cut to half, by 1 or 100 bytes, emptied, deleted, with a flipped byte or garbage: opening (for writing or read-only) is corruptedData saying to restore it, and the file stays as it was")
    func damagedKeyStore() async throws {
        let (f, share) = try await Self.sealedLedger()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let keys = path + "/" + ShareLedger.keyStoreFileName
        let good = try #require(FileManager.default.contents(atPath: keys))
        var damages: [(what: String, bytes: Data?)] = [
            ("cut to half", good.prefix(good.count / 2)),
            ("cut by 1 byte", good.prefix(good.count - 1)),
            ("cut by 100 bytes", good.prefix(good.count - 100)),
            ("emptied", Data()),
            ("deleted", nil),
            ("garbage", Data("this is not a key store, only some text in its place".utf8)),
        ]
        for offset in [3, 12, good.count / 2, good.count - 1] {
            var flipped = good
            flipped[offset] ^= 0x20
            damages.append(("byte \(offset) flipped", flipped))
        }
        for (what, bytes) in damages {
            if let bytes {
                try bytes.write(to: URL(fileURLWithPath: keys))
            } else {
                try FileManager.default.removeItem(atPath: keys)
            }
            for readOnly in [false, true] {
                do {
                    let ledger = try Self.open(path, readOnly: readOnly)
                    await ledger.close()
                    Issue.record("\(what): the ledger opened (read-only: \(readOnly))")
                } catch {
                    #expect(error.code == .corruptedData, "\(what): \(error)")
                    #expect(
                        error.message.contains(ShareLedger.keyStoreFileName) && error.message.contains("restore it from its backup"),
                        "\(what): \(error.message)")
                }
                #expect(FileManager.default.contents(atPath: keys) == bytes, "\(what): opening changed the key store")
                #expect(!FileManager.default.fileExists(atPath: keys + ".new"), "\(what)")
            }
        }
        // Restored: everything reads again.
        try good.write(to: URL(fileURLWithPath: keys))
        let restored = try Self.open(path)
        let shown = try Self.shown(restored, share.url)
        #expect(shown.title == Self.title && shown.invitee == Self.invitee)
        await restored.close()
    }

    @Test("a record torn by a crash while appending a key no commit used: the ledger opens, the file stays, the next key cuts it off")
    func tornAppendBeyondTheLog() async throws {
        let (f, share) = try await Self.sealedLedger()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let keys = path + "/" + ShareLedger.keyStoreFileName
        let good = try #require(FileManager.default.contents(atPath: keys))
        let torn = good + Data([2, 0, 9]) + Data("iCloud".utf8)
        try torn.write(to: URL(fileURLWithPath: keys))
        for readOnly in [true, false] {
            let ledger = try Self.open(path, readOnly: readOnly)
            #expect(try Self.shown(ledger, share.url).title == Self.title)
            await ledger.close()
            #expect(FileManager.default.contents(atPath: keys) == torn, "opening rewrote the key store")
        }
        let ledger = try Self.open(path)
        try await ledger.registerUser("_new", in: Self.container, emailAddress: "new.person@example.com")
        let grown = try #require(FileManager.default.contents(atPath: keys))
        #expect(grown.prefix(good.count) == good && grown.count > good.count && grown.count < torn.count + 200)
        await ledger.close()
        let reopened = try Self.open(path, readOnly: true)
        #expect(
            try reopened.container(Self.container, userRecordName: "_alice").userIdentity(forEmailAddress: "new.person@example.com")?
                .userRecordID?.recordName == "_new")
        await reopened.close()
    }

    @Test("a ledger whose log holds nothing sealed opens without a key store; opened for writing, it makes one")
    func nothingSealedNoKeyStore() async throws {
        let dir = TemporaryDirectory()
        let path = dir.child("ledger")
        var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        try await ledger.registerUser("_plain", in: Self.container)
        _ = try await ledger.container(Self.container, userRecordName: "_plain").save(RecordZone(zoneID: SharingFixture.zone))
        await ledger.close()
        let keys = path + "/" + ShareLedger.keyStoreFileName
        try FileManager.default.removeItem(atPath: keys)
        let readOnly = try Self.open(path, readOnly: true)
        #expect(try readOnly.statistics().users == 1)
        await readOnly.close()
        #expect(!FileManager.default.fileExists(atPath: keys))
        let writable = try Self.open(path)
        await writable.close()
        #expect(FileManager.default.fileExists(atPath: keys))
    }

    @Test("a key store of the first layout (SLKEYS1, no header) opens as it is and is rewritten in the new one by the next write")
    func firstLayoutUpgrades() async throws {
        let (f, share) = try await Self.sealedLedger()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let keys = path + "/" + ShareLedger.keyStoreFileName
        let good = try #require(FileManager.default.contents(atPath: keys))
        #expect(good.prefix(8) == Data("SLKEYS2\n".utf8))
        // The same records behind the first layout's magic.
        let legacy = Data("SLKEYS1\n".utf8) + good.dropFirst(PersonalDataVault.headerBytes)
        try legacy.write(to: URL(fileURLWithPath: keys))
        let ledger = try Self.open(path)
        #expect(try Self.shown(ledger, share.url).title == Self.title)
        #expect(FileManager.default.contents(atPath: keys) == legacy, "opening rewrote the key store")
        try await ledger.registerUser("_next", in: Self.container, emailAddress: "next.person@example.com")
        let upgraded = try #require(FileManager.default.contents(atPath: keys))
        #expect(upgraded.prefix(8) == Data("SLKEYS2\n".utf8))
        await ledger.close()
        // The upgraded store is checked like any: cut by one byte, it is refused.
        try upgraded.prefix(upgraded.count - 1).write(to: URL(fileURLWithPath: keys))
        #expect(throws: LedgerError.self) { _ = try Self.open(path, readOnly: true) }
        try upgraded.write(to: URL(fileURLWithPath: keys))
        let reopened = try Self.open(path, readOnly: true)
        #expect(try Self.shown(reopened, share.url).title == Self.title)
        await reopened.close()
    }

    @Test(
        "without a backup, replaceLostKeyStore puts a new store in place: the ledger opens, sealed data answers erased, the lost file is kept beside it; an intact store is refused and left as it is")
    func replaceLost() async throws {
        let (f, share) = try await Self.sealedLedger()
        await f.ledger.close()
        let path = f.dir.child("ledger")
        let keys = path + "/" + ShareLedger.keyStoreFileName
        let good = try #require(FileManager.default.contents(atPath: keys))
        await #expect(throws: LedgerError.self) { _ = try await ShareLedger.replaceLostKeyStore(at: path) }
        #expect(FileManager.default.contents(atPath: keys) == good)
        let cut = good.prefix(good.count - 100)
        try cut.write(to: URL(fileURLWithPath: keys))
        let moved = try #require(try await ShareLedger.replaceLostKeyStore(at: path))
        #expect(FileManager.default.contents(atPath: moved) == cut)
        let ledger = try Self.open(path)
        let shown = try Self.shown(ledger, share.url)
        #expect(shown.title != Self.title && shown.invitee == nil)
        try await ledger.registerUser("_fresh", in: Self.container, emailAddress: "fresh.start@example.com")
        await ledger.close()
        let reopened = try Self.open(path, readOnly: true)
        #expect(
            try reopened.container(Self.container, userRecordName: "_bob").userIdentity(forEmailAddress: "fresh.start@example.com")?
                .userRecordID?.recordName == "_fresh")
        await reopened.close()
    }

    // MARK: - Item: a forget reaches every open ledger

    @Test("a forget through another ShareLedger on the same directory: this one's next read shows the title and the address erased")
    func forgetThroughAnotherInstance() async throws {
        let (f, share) = try await Self.sealedLedger()
        let other = try Self.open(f.dir.child("ledger"))
        // Kept answers and opened boxes in the other ledger.
        for _ in 0..<2 {
            let shown = try Self.shown(other, share.url)
            #expect(shown.title == Self.title && shown.invitee == Self.invitee)
        }
        try await f.ledger.forget(user: "_alice", in: Self.container, requestedBy: "dsr-1")
        #expect(try await f.ledger.forget(address: LookupInfo(emailAddress: Self.invitee), in: Self.container, requestedBy: "dsr-2"))
        let shown = try Self.shown(other, share.url)
        #expect(shown.title != Self.title, "the other ledger still shows the forgotten owner's title")
        #expect(shown.invitee == nil, "the other ledger still shows the forgotten address")
        await other.close()
        await f.ledger.close()
    }

    @Test(
        "this ledger's own commits need no look at the key file; another process's forget, even with this ledger's commit after it, gets one before the next answer"
    )
    func ownCommitsNeedNoLook() async throws {
        let (f, share) = try await Self.sealedLedger()
        let path = f.dir.child("ledger")
        let vault = try #require(f.ledger.store.models.vault)
        #expect(try Self.shown(f.ledger, share.url).title == Self.title)
        let before = vault.fileLooks.load(ordering: .relaxed)
        // Commits of this ledger's writer, each read after: none sends a reader to the key file.
        _ = try await f.alice.addParticipant(
            LookupInfo(userRecordID: RecordID(userRecordName: "_carol")), permission: .readWrite, to: share.url)
        _ = try await f.bob.shareMetadata(for: share.url)
        try await f.ledger.registerUser("_dave", in: Self.container, emailAddress: "dave.own@example.com")
        #expect(try Self.shown(f.ledger, share.url).title == Self.title)
        #expect(vault.fileLooks.load(ordering: .relaxed) == before, "a reader looked at the key file after this ledger's own commits")
        // A command is queued (it looked before queuing), another process forgets alice, then this
        // ledger's writer commits: the id of its commit does not follow the last one seen, so the
        // next answer looks.
        let log = f.ledger.log
        log.setWriterPaused(true)
        let ledger = f.ledger
        let queued = Task {
            try await ledger.registerUser("_erin", in: Self.container, emailAddress: "erin.after@example.com")
        }
        try await waitUntil("the command is queued") { log.queuedCommands == 1 }
        let forget = try await runCLI(["forget", "--path", path, "--user", "_alice", "--container", Self.container])
        log.setWriterPaused(false)
        _ = try await queued.value
        #expect(forget.exited(0), "\(forget.summary)")
        #expect(try Self.shown(f.ledger, share.url).title != Self.title, "the forgotten owner's title is still shown")
        #expect(vault.fileLooks.load(ordering: .relaxed) > before)
        await f.ledger.close()
    }

    @Test("a forget by another process (share-ledger forget): this process's open ledger answers erased at its next read")
    func forgetInAnotherProcess() async throws {
        let (f, share) = try await Self.sealedLedger()
        let path = f.dir.child("ledger")
        for _ in 0..<2 {
            let shown = try Self.shown(f.ledger, share.url)
            #expect(shown.title == Self.title && shown.invitee == Self.invitee)
        }
        let user = try await runCLI(["forget", "--path", path, "--user", "_alice", "--container", Self.container])
        #expect(user.exited(0), "\(user.summary)")
        var shown = try Self.shown(f.ledger, share.url)
        #expect(shown.title != Self.title, "the open ledger still shows the title of an owner another process forgot")
        let address = try await runCLI(["forget", "--path", path, "--email", Self.invitee, "--container", Self.container])
        #expect(address.exited(0), "\(address.summary)")
        shown = try Self.shown(f.ledger, share.url)
        #expect(shown.invitee == nil, "the open ledger still shows an address another process forgot")
        // And it keeps writing with the key store as the other process left it.
        try await f.ledger.registerUser("_after", in: Self.container, emailAddress: "after.forget@example.com")
        await f.ledger.close()
        let reopened = try Self.open(path, readOnly: true)
        #expect(try Self.shown(reopened, share.url).title != Self.title)
        #expect(
            try reopened.container(Self.container, userRecordName: "_bob").userIdentity(forEmailAddress: "after.forget@example.com")?
                .userRecordID?.recordName == "_after")
        await reopened.close()
    }
}
