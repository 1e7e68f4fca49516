import Foundation

/// A fresh directory under the system's temporary directory, removed when the test is done.
public final class TemporaryDirectory: Sendable {
    /// The directory.
    public let url: URL
    /// The directory's path.
    public var path: String { url.path }

    /// Creates a fresh directory named after the calling test.
    public init(_ label: String = #function) {
        let safe = label.filter { $0.isLetter || $0.isNumber }
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("shareledger-tests", isDirectory: true)
            .appendingPathComponent("\(safe.prefix(40))-\(UUID().uuidString)", isDirectory: true)
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// A path inside the directory (not created).
    public func child(_ name: String) -> String { url.appendingPathComponent(name).path }

    /// A new empty directory inside this one.
    public func makeChild(_ name: String) -> String {
        let path = child(name)
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }
}
