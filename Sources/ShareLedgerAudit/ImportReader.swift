import EventLog
import Foundation
import ShareLedger
import SharingDomain

extension LogNDJSON {
    /// The longest line a valid event can make: its payload (at most
    /// `EventLog.Limits.maxPayloadBytes`) in base64, its four names (container, actor, stream, event
    /// type: at most `EventLog.Limits.maxNameBytes` each) with every byte escaped as `\u00xx`, and
    /// 1,024 bytes for the keys, numbers, ids and hashes (which take under 600).
    public static let maxLineBytes =
        (EventLog.Limits.maxPayloadBytes + 2) / 3 * 4 + 4 * EventLog.Limits.maxNameBytes * 6 + 1_024

    /// Reads an import in chunks of 1 MiB, refusing a line longer than ``maxLineBytes`` as soon as
    /// that many of its bytes were read (memory stays bounded by the lines before it, not by the
    /// longest line).
    static func readImport(from handle: FileHandle) throws(LedgerError) -> [UInt8] {
        var bytes: [UInt8] = []
        var lineStart = 0
        var lineNumber = 1
        while true {
            let chunk: Data?
            do {
                chunk = try handle.read(upToCount: 1 << 20)
            } catch {
                throw LedgerError(.invalidArguments, "reading the file to import failed: \(error)")
            }
            guard let chunk, !chunk.isEmpty else { break }
            let base = bytes.count
            bytes.append(contentsOf: chunk)
            var tooLong = false
            chunk.withUnsafeBytes { raw in
                for (offset, byte) in raw.enumerated() where byte == UInt8(ascii: "\n") {
                    if base + offset - lineStart > maxLineBytes {
                        tooLong = true
                        return
                    }
                    lineStart = base + offset + 1
                    lineNumber += 1
                }
            }
            if tooLong || bytes.count - lineStart > maxLineBytes {
                throw LedgerError(
                    .invalidArguments, "line \(lineNumber) of the import is refused: it is longer than \(maxLineBytes) "
                        + "bytes, the longest line a valid event makes; nothing was imported")
            }
        }
        return bytes
    }
}
