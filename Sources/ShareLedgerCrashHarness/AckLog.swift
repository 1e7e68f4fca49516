import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One command the crash child saw acknowledged: its `await` returned, so it is committed.
///
/// The child appends one line per acknowledgement to its side file, with a single write(2) on an
/// `O_APPEND` descriptor: `<kind> <field>...\n`. Each command creates or changes a uniquely named
/// entity, so the line says where to find the command's effect after a crash.
public enum Ack: Sendable, Hashable, CustomStringConvertible {
    /// `registerUser(user)`.
    case register(user: String)
    /// The owner saved its zone (`save(RecordZone)`).
    case zone(owner: String)
    /// The owner saved a new record.
    case record(owner: String, record: String)
    /// The owner shared the record; `url` is the share's URL.
    case share(owner: String, record: String, url: String)
    /// The owner invited `user` to the (private) share at `url`.
    case invite(url: String, user: String)
    /// `user` fetched the metadata of `url`.
    case fetch(url: String, user: String)
    /// `user` accepted the share at `url`.
    case accept(url: String, user: String)

    /// The line the child writes (with its newline).
    public var line: String {
        switch self {
        case .register(let user): return "register \(user)\n"
        case .zone(let owner): return "zone \(owner)\n"
        case .record(let owner, let record): return "record \(owner) \(record)\n"
        case .share(let owner, let record, let url): return "share \(owner) \(record) \(url)\n"
        case .invite(let url, let user): return "invite \(url) \(user)\n"
        case .fetch(let url, let user): return "fetch \(url) \(user)\n"
        case .accept(let url, let user): return "accept \(url) \(user)\n"
        }
    }

    /// Parses one line (without its newline); nil when it is not a whole acknowledgement.
    public init?(line: Substring) {
        let fields = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        guard let kind = fields.first, fields.dropFirst().allSatisfy({ !$0.isEmpty }) else { return nil }
        switch (kind, fields.count) {
        case ("register", 2): self = .register(user: fields[1])
        case ("zone", 2): self = .zone(owner: fields[1])
        case ("record", 3): self = .record(owner: fields[1], record: fields[2])
        case ("share", 4): self = .share(owner: fields[1], record: fields[2], url: fields[3])
        case ("invite", 3): self = .invite(url: fields[1], user: fields[2])
        case ("fetch", 3): self = .fetch(url: fields[1], user: fields[2])
        case ("accept", 3): self = .accept(url: fields[1], user: fields[2])
        default: return nil
        }
    }

    public var description: String { String(line.dropLast()) }
}

/// The side file of acknowledgements: written by the child, read by the verifier.
public enum AckLog {
    /// What a side file holds.
    public struct Contents: Sendable {
        /// Every whole acknowledgement, in file order.
        public var acks: [Ack] = []
        /// A last line without its newline: the kill cut the write (the command may be committed;
        /// it was not acknowledged to the child's caller as far as the file can tell).
        public var cutLines = 0
        /// Whole lines (newline-terminated) that do not parse: never expected.
        public var malformedLines: [String] = []
    }

    /// Reads a side file; a missing file holds nothing (the child was killed before its first ack).
    public static func read(_ path: String) throws -> Contents {
        guard FileManager.default.fileExists(atPath: path) else { return Contents() }
        let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
        var contents = Contents()
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        // The piece after the last newline is empty for a file of whole lines; anything else was cut.
        if let last = lines.popLast(), !last.isEmpty { contents.cutLines += 1 }
        for line in lines {
            if let ack = Ack(line: line) {
                contents.acks.append(ack)
            } else {
                contents.malformedLines.append(String(line))
            }
        }
        return contents
    }

    /// An open side file for the child: each ``append(_:)`` is one write(2) of a whole line.
    public final class Writer: Sendable {
        private let fd: Int32

        public init(path: String) throws {
            fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
            guard fd >= 0 else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
            }
        }

        /// Appends the acknowledgement's line with one write(2), so a kill leaves a whole line or a
        /// line without its newline, never two lines mixed.
        public func append(_ ack: Ack) {
            let bytes = Array(ack.line.utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written != bytes.count {
                FileHandle.standardError.write(Data("crash child: short write of an acknowledgement (\(written))\n".utf8))
                exit(73)
            }
        }
    }
}
