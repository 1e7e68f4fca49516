import Foundation
import ShareLedger
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A deterministic random source (SplitMix64) so that kill times repeat from run to run.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("Crash safety")
struct CrashTests {
    /// Starts the crash child, waits until it has acknowledged some appends, kills it with SIGKILL.
    private func runAndKill(ledger: String, acks: String, after milliseconds: Int) throws {
        let process = Process()
        process.executableURL = builtProduct("ShareLedgerCrashChild")
        process.arguments = [ledger, acks, "8"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.standardError
        try process.run()
        // Wait for "ready" (the ledger is open) before the clock starts.
        let ready = out.fileHandleForReading.availableData
        #expect(String(decoding: ready, as: UTF8.self).contains("ready"))
        usleep(useconds_t(milliseconds * 1_000))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
    }

    @Test("appends acknowledged before SIGKILL are all there after reopening, once each", .timeLimit(.minutes(2)))
    func acknowledgedAppendsSurviveSIGKILL() async throws {
        let dir = TemporaryDirectory()
        let ledger = dir.child("ledger")
        let acks = dir.child("acks")
        var random = SplitMix64(state: 0x5EED)
        for _ in 0..<4 {
            try runAndKill(ledger: ledger, acks: acks, after: Int.random(in: 80...400, using: &random))
        }
        let lines = try String(contentsOfFile: acks, encoding: .utf8).split(separator: "\n")
        var acknowledged: [(UInt64, UUID)] = []
        for line in lines {
            let parts = line.split(separator: " ")
            // A line cut by the kill has no id; the append it reports was still acknowledged only
            // if the line was written whole, so skip partial lines.
            guard parts.count == 2, let position = UInt64(parts[0]), let id = UUID(uuidString: String(parts[1])) else {
                continue
            }
            acknowledged.append((position, id))
        }
        #expect(acknowledged.count > 50, "the child acknowledged \(acknowledged.count) appends")

        var configuration = Fixtures.configuration(ledger)
        configuration.createIfMissing = false
        let log = try EventLog.open(configuration)
        let verification = try log.verifyChain()
        #expect(verification.isValid, "\(verification.problem ?? "")")
        var occurrences: [UUID: Int] = [:]
        var after = LogPosition.start
        while true {
            let chunk = try log.events(after: after, limit: 4096)
            guard let last = chunk.last else { break }
            for event in chunk { occurrences[event.commandID, default: 0] += 1 }
            after = last.position
        }
        for (position, id) in acknowledged {
            #expect(try log.event(at: LogPosition(position))?.commandID == id, "acknowledged append at \(position)")
            #expect(occurrences[id] == 1)
        }
        #expect(Set(acknowledged.map(\.0)).count == acknowledged.count)
        // The ledger takes appends again after the crashes.
        let result = try await log.append([Fixtures.draft("after")], to: "s", metadata: Fixtures.metadata())
        #expect(result.positions.lowerBound.rawValue == verification.headPosition + 1)
        await log.close()
    }
}
