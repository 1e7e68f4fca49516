// Share actions for an instruction count: run under `valgrind --tool=callgrind` with two cycle counts,
// and the difference of the two totals over the difference of the actions is the instructions one
// share action costs the whole process (every thread), whatever the machine's speed.
//
//   InstructionCount CYCLES LEDGER_DIR
//
// One owner with a zone of 400 root records and three invitees (set up alike in every run), then
// CYCLES share cycles, one at a time: create a share, invite the three by user record name, fetch the
// metadata as each (logged), accept as two of them — 9 actions, as `share-ledger bench` runs them.
// One caller, so every action is a group commit of its own, and durability unsafeNoSync, so the count
// is the ledger's and LMDB's own work, not the kernel's flushes (valgrind counts user space only).
//
// A synchronous main that waits on a semaphore: valgrind cannot run a Swift async main (it stops with
// an internal error when the main thread parks in dispatch_main and another thread starts).
import Dispatch
import Foundation
import ShareLedger

let arguments = CommandLine.arguments
guard arguments.count == 3, let cycles = Int(arguments[1]), cycles >= 0, cycles <= 400 else {
    FileHandle.standardError.write(Data("usage: InstructionCount CYCLES(0...400) LEDGER_DIR\n".utf8))
    exit(64)
}
let path = arguments[2]
let container = "iCloud.com.example.count"

func run() async throws {
    var configuration = ShareLedger.Configuration(path: path, durability: .unsafeNoSync, initialMapSize: 1 << 30)
    configuration.residualTaskWorker = nil
    // No poll between commands: a poll's length in instructions depends on the clock.
    configuration.writerPollMicroseconds = 0
    let ledger = try ShareLedger.open(configuration)
    let zone = RecordZoneID(zoneName: "Count")
    let invitees = (0..<3).map { "_invitee\($0)" }
    try await ledger.registerUser("_owner", in: container)
    for (index, name) in invitees.enumerated() {
        try await ledger.registerUser(name, in: container, emailAddress: "invitee\(index)@example.com")
    }
    let owner = ledger.container(container, userRecordName: "_owner")
    _ = try await owner.save(RecordZone(zoneID: zone))
    for record in 0..<400 {
        _ = try await owner.save(Record(recordType: "Doc", recordID: RecordID(recordName: "doc\(record)", zoneID: zone)))
    }
    for record in 0..<cycles {
        let url = try await owner.share(rootRecord: RecordID(recordName: "doc\(record)", zoneID: zone)).url
        for name in invitees {
            _ = try await owner.addParticipant(LookupInfo(userRecordID: RecordID(userRecordName: name)), permission: .readWrite, to: url)
        }
        var metadatas: [Share.Metadata] = []
        for name in invitees { metadatas.append(try await ledger.container(container, userRecordName: name).shareMetadata(for: url)) }
        for index in 0..<2 { _ = try await ledger.container(container, userRecordName: invitees[index]).accept(metadatas[index]) }
    }
    await ledger.close()
}

let done = DispatchSemaphore(value: 0)
nonisolated(unsafe) var failure: (any Error)?
Task.detached {
    do { try await run() } catch { failure = error }
    done.signal()
}
done.wait()
if let failure {
    FileHandle.standardError.write(Data("InstructionCount: \(failure)\n".utf8))
    exit(1)
}
print("\(cycles * 9) actions")
