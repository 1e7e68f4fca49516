import Foundation
import PropertyBased
@testable import ShareLedger
import TestSupport
import Testing

/// Kept metadata answers (``Container/shareMetadataWithoutLogging(for:)``) are always the answers the
/// read models give at that moment.
@Suite("Metadata cache")
struct MetadataCacheTests {
    /// Every user's answer for every share URL, kept and fresh, as comparable values.
    private static func answers(_ f: SharingFixture, urls: [URL], usingCache: Bool) -> [String] {
        var out: [String] = []
        for user in ReplayPropertyTests.users {
            for url in urls {
                do {
                    let metadata = try f.as_(user).shareMetadataWithoutLogging(for: url, usingCache: usingCache)
                    out.append("\(user) \(url.lastPathComponent): \(metadata.hashValue) \(metadata)")
                } catch {
                    out.append("\(user) \(url.lastPathComponent): \(error.code.name)")
                }
            }
        }
        return out
    }

    @Test("after every random action, each user's kept answer for each share equals a fresh one")
    func keptAnswersAreFresh() async throws {
        let hits = Counts()
        let body: @Sendable ([Int]) async throws -> Void = { numbers in
            let f = try await SharingFixture(seed: UInt64(numbers.count) &+ 7)
            for user in ReplayPropertyTests.users.prefix(3) {
                let zone = RecordZoneID(zoneName: "Z0")
                _ = try await f.as_(user).save(RecordZone(zoneID: zone))
                _ = try await f.as_(user).save(Record(recordType: "Item", recordID: RecordID(recordName: "r0", zoneID: zone)))
                _ = try await f.as_(user).share(rootRecord: RecordID(recordName: "r0", zoneID: zone), publicPermission: user == "_carol" ? .readOnly : .none)
            }
            // Every URL ever seen, so deleted and re-created shares (same URL) are asked about too.
            var urls: Set<URL> = []
            var local: [String: Int] = [:]
            var index = 0
            while index + 2 < numbers.count {
                await ReplayPropertyTests.perform(f, numbers[index], numbers[index + 1], numbers[index + 2], codes: &local)
                index += 3
                for user in ReplayPropertyTests.users.prefix(3) {
                    for share in (try? f.as_(user).ownedShares()) ?? [] { urls.insert(share.url) }
                }
                let sorted = urls.sorted { $0.absoluteString < $1.absoluteString }
                // Asked twice through the cache (the second time mostly from it), then fresh.
                _ = Self.answers(f, urls: sorted, usingCache: true)
                let before = f.ledger.metadataCache?.count ?? 0
                let kept = Self.answers(f, urls: sorted, usingCache: true)
                let fresh = Self.answers(f, urls: sorted, usingCache: false)
                let first = zip(kept, fresh).first { $0 != $1 }
                #expect(kept.count == fresh.count && first == nil, "kept: \(first?.0 ?? "-")\nfresh: \(first?.1 ?? "-")")
                hits.add(["entries": before])
            }
            await f.ledger.close()
        }
        // Fixed sequences first (coverage below rests on them), then random ones.
        for numbers in fixedSequences(count: 8, length: 30...120) { try await body(numbers) }
        await propertyCheck(count: 12, input: Gen.int(in: 0...1_000_000).array(of: 30...120)) { numbers in try await body(numbers) }
        #expect((hits.value["entries"] ?? 0) > 100, "the cache was used: \(hits.value)")
    }

    @Test("capacity 0 turns the cache off; a full cache starts over")
    func capacity() async throws {
        let cache = MetadataCache(capacity: 2)
        let f = try await SharingFixture()
        let share = try await f.makeHierarchy()
        let metadata = try f.alice.shareMetadataWithoutLogging(for: share.url)
        for index in 0..<3 {
            cache.store(MetadataCache.Key(token: "t\(index)", container: "c", viewer: "v"), MetadataCache.Entry(validator: 1, metadata: metadata))
        }
        #expect(cache.count == 1)
        #expect(f.ledger.metadataCache != nil)
        await f.ledger.close()

        var configuration = Fixtures.configuration(f.dir.child("off"))
        configuration.metadataCacheCapacity = 0
        let off = try ShareLedger.open(configuration)
        #expect(off.metadataCache == nil)
        await off.close()
    }
}
