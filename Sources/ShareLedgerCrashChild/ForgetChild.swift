import Foundation
import ShareLedger

#if canImport(Glibc)
import Glibc
#endif

/// The `--forget` mode of the crash child: clients register users with an email, a phone and a
/// name, writing "registered <name>\n" to the acknowledgement file after each registration returns,
/// and forget every second one, writing "forgot <name>\n" after the forget returns. A kill can land
/// while a key is appended to the key store, between a forget's commit and its key's destruction,
/// or while the key store is rewritten.
func runForgetChild(_ arguments: [String]) async {
    let ledgerPath = arguments[0]
    let ackPath = arguments[1]
    let clients = arguments.count > 2 ? Int(arguments[2]) ?? 4 : 4
    let container = "iCloud.com.example.crash"
    let ackFD = open(ackPath, O_WRONLY | O_APPEND | O_CREAT, 0o644)
    guard ackFD >= 0 else { exit(66) }
    func acknowledge(_ line: String) { _ = line.withCString { write(ackFD, $0, strlen($0)) } }
    var configuration = ShareLedger.Configuration(path: ledgerPath, durability: .durable)
    configuration.residualTaskWorker = nil
    do {
        let ledger = try ShareLedger.open(configuration)
        let run = getpid()
        FileHandle.standardOutput.write(Data("ready\n".utf8))
        await withTaskGroup(of: Void.self) { group in
            for client in 0..<clients {
                group.addTask {
                    var index = 0
                    while true {
                        index += 1
                        let name = "_f\(run)_\(client)_\(index)"
                        var names = PersonNameComponents()
                        names.givenName = "Given\(run)x\(client)x\(index)"
                        do {
                            try await ledger.registerUser(
                                name, in: container, emailAddress: forgetCrashEmail(name),
                                phoneNumber: "+1 " + String(format: "%07d%02d%06d", run, client, index), nameComponents: names)
                            acknowledge("registered \(name)\n")
                            if index % 2 == 0 {
                                try await ledger.forget(user: name, in: container, requestedBy: "crash-test")
                                acknowledge("forgot \(name)\n")
                            }
                        } catch {
                            FileHandle.standardError.write(Data("forget child failed: \(error)\n".utf8))
                            exit(71)
                        }
                    }
                }
            }
        }
    } catch {
        FileHandle.standardError.write(Data("forget child failed: \(error)\n".utf8))
        exit(70)
    }
}

/// The email the forget child registers `name` with.
func forgetCrashEmail(_ name: String) -> String { "\(name.dropFirst())@forget.example" }
