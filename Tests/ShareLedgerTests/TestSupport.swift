import Foundation
import ShareLedger
import Synchronization
import TestSupport

enum Fixtures {
    static let container = LogFixtures.container

    static func configuration(
        _ path: String, durability: Durability = .unsafeNoSync, clock: any LedgerClock = SteppingClock()
    ) -> ShareLedger.Configuration {
        ShareLedger.Configuration(path: path, durability: durability, clock: clock)
    }

    static func draft(_ text: String, type: String = "shareledger.test.Note") -> EventDraft {
        LogFixtures.draft(text, type: type)
    }

    static func metadata(_ actor: String = "tester", id: UUID = UUID()) -> CommandMetadata {
        LogFixtures.metadata(actor, id: id)
    }
}
