import Foundation
import ShareLedger
import ShareLedgerFuzzSupport

/// The fuzz targets. One binary holds them all; `SHARELEDGER_FUZZ_TARGET` (or the replayer's first
/// argument) picks one.
enum FuzzTarget: String, CaseIterable, Sendable {
    /// A stored log entry (the envelope decoder and the chain scanners), or, when the first byte is
    /// odd, a domain event payload: the second byte picks the event type, the rest is the payload.
    case envelope
    /// A share URL or token, as text.
    case url
    /// One NDJSON import line.
    case ndjson
    /// One request body of an endpoint of `share-ledger serve` (the first byte picks the endpoint).
    case http

    /// Runs one input through the target.
    func run(_ bytes: UnsafeRawBufferPointer) {
        switch self {
        case .envelope:
            if let first = bytes.first, first & 1 == 1, bytes.count >= 2 {
                let types = FuzzingEntryPoints.domainEventTypes
                FuzzingEntryPoints.domainEvent(
                    type: types[Int(bytes[1]) % types.count], schemaVersion: 1, payload: Array(bytes[2...]))
            } else {
                FuzzingEntryPoints.storedEntry(bytes)
            }
        case .url:
            FuzzingEntryPoints.shareURL(String(decoding: bytes, as: UTF8.self))
        case .ndjson:
            FuzzingEntryPoints.ndjsonLine(Array(bytes)[...])
        case .http:
            HTTPBodyFuzzTarget.run(Array(bytes))
        }
    }

    /// The target `SHARELEDGER_FUZZ_TARGET` names.
    static let selected: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["SHARELEDGER_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            FileHandle.standardError.write(
                Data("set SHARELEDGER_FUZZ_TARGET to one of: \(allCases.map(\.rawValue).joined(separator: ", "))\n".utf8))
            exit(2)
        }
        return target
    }()
}

/// libFuzzer's entry point: called once per input by the fuzzing engine (a build with
/// `--sanitize=fuzzer`). A plain build never calls it.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    FuzzTarget.selected.run(UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size))
    return 0
}
