import Foundation

/// The package's root directory (the one holding Package.swift), found from this file's path.
public let packageRoot: URL = {
    var root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    while root.path != "/" && !FileManager.default.fileExists(atPath: root.appendingPathComponent("Package.swift").path) {
        root = root.deletingLastPathComponent()
    }
    return root
}()

/// Finds an executable this package builds (the tests depend on its target, so `swift test` builds it).
public func builtProduct(_ name: String) -> URL {
    let fileManager = FileManager.default
    var candidates: [URL] = []
    // The test runner lives in the build products directory (.build/<config>/...xctest).
    let runner = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var directory = runner.deletingLastPathComponent()
    for _ in 0..<4 {
        candidates.append(directory.appendingPathComponent(name))
        directory = directory.deletingLastPathComponent()
    }
    // Fall back to the package's .build directory.
    for configuration in ["debug", "release"] {
        candidates.append(packageRoot.appendingPathComponent(".build/\(configuration)/\(name)"))
    }
    for candidate in candidates where fileManager.isExecutableFile(atPath: candidate.path) {
        return candidate
    }
    fatalError("cannot find the built product \(name); looked at \(candidates.map(\.path))")
}
