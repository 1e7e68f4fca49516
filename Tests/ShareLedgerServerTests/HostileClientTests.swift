import Foundation
import NIOHTTP1
import Logging
import ServiceLifecycle
import ShareLedger
import ShareLedgerServer
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What an outside probe found the server doing wrong with hostile or careless clients and operators:
/// a credentials file it could not read (served on, refusing everything, silently), an email lookup
/// that told anyone whether an address has an account and left no trace, a forgotten user's tokens
/// that kept working, and a refused oversized body that left the client's send blocked.
@Suite("Server: hostile clients and careless operators")
struct HostileClientTests {
    // MARK: - The credentials file

    /// Runs a server over a fresh ledger whose credentials file holds `contents` (nil: no file) until
    /// it listens or stops; returns how it ended and what it logged.
    static func start(credentialsFile contents: String?) async throws -> (outcome: String, logs: [String]) {
        let directory = TemporaryDirectory()
        let ledger = try ShareLedger.open(.init(path: directory.path, createIfMissing: true))
        if let contents {
            #expect(FileManager.default.createFile(atPath: directory.child(ServerCredentials.fileName), contents: Data(contents.utf8)))
        }
        let capture = LogCapture()
        let logger = Logger(label: "test.server") { _ in capture.handler() }
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        let server = LedgerServer(
            ledger: ledger, credentials: ServerCredentials(ledgerPath: directory.path),
            configuration: .init(host: "127.0.0.1", port: 0), logger: logger,
            onServerRunning: { port in portContinuation.yield(port) })
        let group = ServiceGroup(services: [server], logger: logger)
        let outcome = try await withThrowingTaskGroup(of: String.self) { tasks in
            tasks.addTask {
                do {
                    try await group.run()
                    return "stopped"
                } catch {
                    return "failed: \(error)"
                }
            }
            tasks.addTask {
                var iterator = ports.makeAsyncIterator()
                return await iterator.next() == nil ? "no port" : "listening"
            }
            let first = try await tasks.next() ?? "nothing"
            portContinuation.finish()
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return first
        }
        await ledger.close()
        return (outcome, capture.all)
    }

    @Test("a garbled or unreadable credentials file stops the server before it listens, with an error naming the file")
    func garbledCredentialsFile() async throws {
        for contents in ["{not json", "", "{\"version\":1,\"credentials\":[{\"id\":3}]}", "\u{0}\u{1}binary"] {
            let (outcome, _) = try await Self.start(credentialsFile: contents)
            #expect(outcome.hasPrefix("failed"), "\(contents.debugDescription): \(outcome)")
            #expect(outcome.contains("unreadableFile") && outcome.contains(ServerCredentials.fileName), "\(outcome)")
        }
    }

    @Test("no credentials file: the server starts and says at notice level that no tokens or keys are configured")
    func missingCredentialsFile() async throws {
        let (outcome, logs) = try await Self.start(credentialsFile: nil)
        #expect(outcome == "listening")
        #expect(
            logs.contains { $0.hasPrefix("notice") && $0.contains("no API tokens or server-to-server keys") },
            "\(logs)")
    }

    @Test("`serve` with a garbled credentials file exits 1 with an error that names the file, and never listens")
    func serveRefusesAGarbledCredentialsFile() async throws {
        let directory = TemporaryDirectory()
        // A ledger that opens, so that only the credentials file can stop the start.
        await (try ShareLedger.open(.init(path: directory.path, createIfMissing: true))).close()
        #expect(FileManager.default.createFile(atPath: directory.child(ServerCredentials.fileName), contents: Data("{oops".utf8)))
        let outputPath = directory.child("serve.out")
        let server = try ChildProcess(
            builtProduct("share-ledger"), ["serve", "--path", directory.path, "--port", "0", "--json"], stdout: outputPath)
        defer { server.send(SIGKILL) }  // if the test gives up before its end
        // A failsafe only: a server that starts anyway is stopped after a minute.
        let ended = await server.exit(timeLimit: .seconds(60))
        let output = String(decoding: FileManager.default.contents(atPath: outputPath) ?? Data(), as: UTF8.self)
        #expect(ended.exited(1), "\(ended.summary) \(output)")
        #expect(output.contains("unreadableFile") && output.contains(ServerCredentials.fileName), "\(output)")
        #expect(!output.contains("listening"), "\(output)")
    }

    // MARK: - users/lookup/email

    static func lookupURL(_ server: ServerHarness, webToken: String) -> String {
        "\(server.baseURL)/database/1/\(ServerHarness.container)/development/private/users/lookup/email"
            + "?ckAPIToken=\(server.apiToken)&ckWebAuthToken=\(webToken)"
    }

    static func eventTypes(after position: LogPosition, _ ledger: ShareLedger) throws -> [String] {
        let head = try ledger.log.head().position
        guard head > position else { return [] }
        return try (position.rawValue + 1...head.rawValue).map { position in
            let type = try ledger.log.event(at: LogPosition(position))?.eventType ?? "?"
            return type.split(separator: ".").last.map(String.init) ?? type
        }
    }

    @Test("users/lookup/email: a caller who is not a registered user gets an error and learns nothing; every lookup answered is recorded")
    func lookupEmailIsNoOracle() async throws {
        try await ServerHarness.run { server in
            let ghost = try server.credentials.createWebAuthToken(
                container: ServerHarness.container, userRecordName: "_ghost", expiresAt: Date().addingTimeInterval(3_600))
            let body = Array(#"{"users":[{"emailAddress":"bob@example.com"},{"emailAddress":"nobody@example.com"}]}"#.utf8)
            var head = try server.ledger.log.head().position
            let refused = try await server.send(.POST, Self.lookupURL(server, webToken: ghost.token), body: body)
            #expect(refused.status == 421 || refused.status == 401, "\(refused.status) \(refused.text)")
            #expect(!refused.text.contains("_bob"), "\(refused.text)")
            // Refused as a whole, as a participant lookup by such a caller is: nothing looked up, nothing recorded.
            #expect(try server.ledger.log.head().position == head)

            head = try server.ledger.log.head().position
            let answered = try await server.send(.POST, Self.lookupURL(server, webToken: server.webTokens["_alice"] ?? ""), body: body)
            #expect(answered.status == 200, "\(answered.text)")
            let users = answered.json["users"] as? [[String: Any]] ?? []
            #expect(users.count == 2)
            #expect(users.first?["userRecordName"] as? String == "_bob", "\(answered.text)")
            #expect(users.last?["serverErrorCode"] as? String == "NOT_FOUND", "\(answered.text)")
            #expect(try Self.eventTypes(after: head, server.ledger) == ["ShareParticipantFetched", "ShareParticipantFetched"])
        }
    }

    @Test("a forgotten user's web auth token stops working at once; other users' tokens keep working")
    func forgottenUsersTokensStop() async throws {
        try await ServerHarness.run { server in
            #expect(try await server.post("users/caller", as: "_bob", [:] as [String: Any]).status == 200)
            try await server.ledger.forget(user: "_bob", in: ServerHarness.container)
            let refused = try await server.post("users/caller", as: "_bob", [:] as [String: Any])
            #expect(refused.status == 401, "\(refused.text)")
            #expect(refused.json["serverErrorCode"] as? String == "AUTHENTICATION_FAILED", "\(refused.text)")
            let lookup = try await server.post("users/lookup/email", as: "_bob", ["users": [["emailAddress": "alice@example.com"]]])
            #expect(lookup.status == 401, "\(lookup.text)")
            #expect(try await server.post("users/caller", as: "_alice", [:] as [String: Any]).status == 200)
        }
    }

    // MARK: - A body over the limit

    /// Blocking socket work off the cooperative pool.
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: body()) }
        }
    }

    @Test("a body over the limit: 413 with Connection: close, then the server ends the connection (the client's send does not hang)")
    func oversizedBodyClosesTheConnection() async throws {
        try await ServerHarness.run { server in
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            #expect(fd >= 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(server.port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            #expect(connected == 0)
            // A failsafe only: a read still waiting after 30 s means the server kept the connection open.
            var limit = timeval(tv_sec: 30, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            let total = 50 * 1024 * 1024
            let head =
                "POST /database/1/\(ServerHarness.container)/development/private/users/caller?ckAPIToken=\(server.apiToken)"
                + "&ckWebAuthToken=\(server.webTokens["_alice"] ?? "") HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(total)\r\n\r\n"
            let socket = fd
            // The client sends the whole body, as a naive client does, while it reads the answer.
            async let sent: Int = Self.blocking {
                var sent = Array(head.utf8).withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard sent > 0 else { return 0 }
                let chunk = [UInt8](repeating: 0x20, count: 64 * 1024)
                sent = 0
                while sent < total {
                    let count = chunk.withUnsafeBytes { send(socket, $0.baseAddress, min($0.count, total - sent), Int32(MSG_NOSIGNAL)) }
                    guard count > 0 else { break }
                    sent += count
                }
                return sent
            }
            let (answer, end) = await Self.blocking { () -> ([UInt8], String) in
                var answer: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4_096)
                while true {
                    let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
                    if count > 0 {
                        answer += buffer[0..<count]
                        continue
                    }
                    if count == 0 { return (answer, "end of stream") }
                    let error = errno
                    if error == EINTR { continue }
                    return (answer, error == EAGAIN || error == EWOULDBLOCK ? "still open after 30 s" : "reset")
                }
            }
            let text = String(decoding: answer, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 413"), "\(text)")
            #expect(text.lowercased().contains("connection: close"), "\(text)")
            #expect(end != "still open after 30 s", "\(end); \(text)")
            // Unblock the sender whatever happened, then let it finish.
            shutdown(fd, Int32(SHUT_RDWR))
            _ = await sent
            // The server still serves.
            let after = try await server.post("users/caller", as: "_alice", [:] as [String: Any])
            #expect(after.status == 200)
        }
    }
}
