import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The `curl` walk of README.md's server section, run as it is written there: the `sh` block is
/// read from the README and run by bash in a temporary directory, with the built `share-ledger`
/// first on PATH and `PORT` set to a free loopback port (the block's only parameter).
@Suite("README curl walk")
struct ReadmeCurlWalkTests {
    /// The README's `sh` block after the paragraph that introduces the walk.
    static func walk() throws -> String {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        guard let intro = readme.range(of: "A share's whole life with `curl`"),
            let open = readme.range(of: "```sh\n", range: intro.upperBound..<readme.endIndex),
            let close = readme.range(of: "\n```", range: open.upperBound..<readme.endIndex)
        else { throw HarnessError(message: "README.md has no curl walk after \"A share's whole life with `curl`\"") }
        return String(readme[open.upperBound..<close.lowerBound])
    }

    /// A loopback port nothing listens on now (the kernel's pick for port 0).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError(message: "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw HarnessError(message: "bind() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test("the README's curl walk runs as written, syncs the shared zone, uses the newer features and audits clean", .timeLimit(.minutes(5)))
    func curlWalk() async throws {
        let script = try Self.walk()
        let directory = TemporaryDirectory()
        let binaries = builtProduct("share-ledger").deletingLastPathComponent().path
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = binaries + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["PORT"] = String(try Self.freePort())
        let run = try await runProcess(
            URL(fileURLWithPath: "/bin/bash"), ["-e", "-c", "cd '\(directory.path)'\n" + script], environment: environment,
            timeLimit: .seconds(240))
        #expect(run.exited(0), "\(run.summary)")
        let output = run.stdout
        // The answers, one per line (curl prints each without a newline).
        let answers = output.replacingOccurrences(of: "}{", with: "}\n{").split(separator: "\n")
        // Bob's second sync brought the new item and not the note he had.
        let syncs = answers.filter { $0.contains("\"syncToken\"") && $0.contains("\"moreComing\"") }
        #expect(syncs.contains { $0.contains("\"Item-1\"") && !$0.contains("\"recordType\":\"Note\"") }, "\(output)")
        #expect(output.contains("\"requested\":true"), "\(output)")
        #expect(output.contains("\"hasiCloudAccount\":false") && output.contains("\"hasiCloudAccount\":true"), "\(output)")
        #expect(output.components(separatedBy: "\"participantStatus\":\"ACCEPTED\"").count - 1 >= 3, "Bob, Carol and Dave accepted: \(output)")
        #expect(!output.contains("serverErrorCode"), "\(output)")
        // The audit's verdict, last.
        #expect(output.contains("audit ok: "), "\(output)")
    }
}
