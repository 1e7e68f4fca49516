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
    let (ledgerPath, ackFD, clients) = clientArguments(arguments, defaultClients: 4)
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
                                name, in: crashContainer, emailAddress: forgetCrashEmail(name),
                                phoneNumber: "+1 " + String(format: "%07d%02d%06d", run, client, index), nameComponents: names)
                            acknowledge("registered \(name)\n", to: ackFD)
                            if index % 2 == 0 {
                                try await ledger.forget(user: name, in: crashContainer, requestedBy: "crash-test")
                                acknowledge("forgot \(name)\n", to: ackFD)
                            }
                        } catch {
                            fail("forget child failed: \(error)", status: 71)
                        }
                    }
                }
            }
        }
    } catch {
        fail("forget child failed: \(error)", status: 70)
    }
}

/// The email the forget child registers `name` with.
func forgetCrashEmail(_ name: String) -> String { "\(name.dropFirst())@forget.example" }
