import Foundation
@testable import ShareLedger
import ShareLedgerAudit
import ShareLedgerFuzzSupport
import Testing
import TestSupport

/// The committed fuzz corpus (`Fuzz/corpus`, seeds and every input a fuzzer crashed on) replayed
/// through the same entry points the libFuzzer targets call, in every test run.
@Suite("Fuzz corpus replay")
struct FuzzCorpusTests {
    static let corpus = packageRoot.appendingPathComponent("Fuzz/corpus")

    static func inputs(_ target: String) throws -> [(String, Data)] {
        let folder = corpus.appendingPathComponent(target)
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted().map { name in
            (name, try Data(contentsOf: folder.appendingPathComponent(name)))
        }
    }

    @Test("every envelope input decodes or is refused; the real entries decode, their payloads too")
    func envelopes() throws {
        let inputs = try Self.inputs("envelope")
        #expect(inputs.count > 20)
        for (name, data) in inputs {
            let bytes = [UInt8](data)
            if name.hasPrefix("regress-") {
                // Inputs a fuzzer found, dispatched as the target does (an odd first byte: a payload).
                if let first = bytes.first, first & 1 == 1, bytes.count >= 2 {
                    let types = FuzzingEntryPoints.domainEventTypes
                    FuzzingEntryPoints.domainEvent(type: types[Int(bytes[1]) % types.count], schemaVersion: 1, payload: Array(bytes[2...]))
                } else {
                    _ = bytes.withUnsafeBytes { FuzzingEntryPoints.storedEntry($0) }
                }
            } else if name.hasPrefix("payload-") {
                let types = FuzzingEntryPoints.domainEventTypes
                #expect(FuzzingEntryPoints.domainEvent(type: types[Int(bytes[1]) % types.count], schemaVersion: 1, payload: Array(bytes[2...])), "\(name)")
            } else {
                let decoded = bytes.withUnsafeBytes { FuzzingEntryPoints.storedEntry($0) }
                if name.hasPrefix("entry-") { #expect(decoded, "\(name)") }
                if name == "edge-hash-twice" {
                    // Protobuf's rule (the last of a repeated field wins) lets the full decoder read an
                    // entry with a second hash field; the chain scanner, which verification uses, refuses it.
                    #expect(bytes.withUnsafeBytes { EnvelopeCodec.scanChainFields($0) } == nil)
                } else if name.hasPrefix("edge-") {
                    #expect(!decoded, "\(name)")
                }
            }
        }
    }

    @Test("every URL input parses or is refused; the ledger's own share URLs give their token")
    func urls() throws {
        let inputs = try Self.inputs("url")
        #expect(inputs.count > 10)
        for (name, data) in inputs {
            let token = FuzzingEntryPoints.shareURL(String(decoding: data, as: UTF8.self))
            if name == "url-00" || name == "url-01" { #expect(token != nil, "\(name)") }
        }
    }

    @Test("every HTTP body input is answered without a 5xx; the seeds are the ones the seeder writes")
    func httpBodies() async throws {
        let inputs = try Self.inputs("http")
        #expect(inputs.count >= HTTPBodyFuzzing.seeds.count)
        let seeds = Dictionary(HTTPBodyFuzzing.seeds.map { ($0.name, $0.input) }, uniquingKeysWith: { first, _ in first })
        for (name, data) in inputs where seeds[name] != nil { #expect(seeds[name] == [UInt8](data), "\(name)") }
        let directory = TemporaryDirectory()
        var configuration = ShareLedger.Configuration(path: directory.path, durability: .unsafeNoSync)
        configuration.residualTaskWorker = nil
        let ledger = try ShareLedger.open(configuration)
        try await HTTPBodyFuzzing.prepare(ledger)
        let fuzzer = HTTPBodyFuzzing(ledger: ledger)
        var statuses: [Int: Int] = [:]
        for (name, data) in inputs {
            let status = await fuzzer.answer([UInt8](data))
            #expect(status < 500, "\(name) was answered \(status)")
            statuses[status, default: 0] += 1
        }
        // The seeds reach the endpoints' work, not only their refusals.
        #expect(statuses[200, default: 0] > 50 && statuses[400, default: 0] > 50, "\(statuses)")
        #expect(try LedgerAudit(ledger).audit(scratchPath: directory.child("audit")).ok)
        await ledger.close()
    }

    @Test("every NDJSON input parses or is refused; the export's own lines parse")
    func ndjson() throws {
        let inputs = try Self.inputs("ndjson")
        #expect(inputs.count > 10)
        for (name, data) in inputs {
            let parsed = FuzzingEntryPoints.ndjsonLine([UInt8](data)[...])
            if name.hasPrefix("line-") { #expect(parsed, "\(name)") }
            if name.hasPrefix("edge-") { #expect(!parsed, "\(name)") }
        }
    }
}
