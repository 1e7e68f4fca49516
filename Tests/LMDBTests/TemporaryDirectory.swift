import Foundation

/// A fresh directory under the system's temporary directory, removed when the test is done.
final class TemporaryDirectory: Sendable {
    let url: URL
    var path: String { url.path }

    init(_ label: String = #function) {
        let safe = label.filter { $0.isLetter || $0.isNumber }
        url = FileManager.default.temporaryDirectory
            .appendingPathComponent("shareledger-tests", isDirectory: true)
            .appendingPathComponent("\(safe.prefix(40))-\(UUID().uuidString)", isDirectory: true)
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    /// A path inside the directory (not created).
    func child(_ name: String) -> String { url.appendingPathComponent(name).path }

    /// A new empty directory inside this one.
    func makeChild(_ name: String) -> String {
        let path = child(name)
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }
}
