import Foundation
import ShareLedger

// Building: zones, records, and the shares over them.
extension SimulationClient {
    mutating func createZone() async -> Bool {
        let owner = Int.random(in: 0..<model.people.count, using: &rng)
        let zoneName = ["Notes", "Trips", "Lists", "Photos", "Recipes"].randomElement(using: &rng)! + "-\(model.nextSerial())"
        let handle = as_(owner)
        guard
            let zone = await call("saveZone", .success, "create zone \(zoneName)", { () async throws(LedgerError) in
                try await handle.save(RecordZone(zoneID: RecordZoneID(zoneName: zoneName)))
            })
        else { return true }
        if zone.zoneID.ownerName != name(owner) { mismatch("zone \(zoneName) came back owned by \(zone.zoneID.ownerName)") }
        model.zones.append(SimZone(owner: owner, name: zoneName))
        return true
    }

    mutating func createRecord() async -> Bool {
        guard let zone = model.liveZones.randomElement(using: &rng) else { return false }
        let recordName = "r\(model.nextSerial())"
        // Most records hang below another one: parent chains, the hierarchies shares are made of.
        let parent = rng.chance(0.6) ? model.zones[zone].records.randomElement(using: &rng)?.name : nil
        var record = Record(
            recordType: parent == nil ? "List" : "Item", recordID: recordID(recordName, zone: zone),
            fields: ["title": .string("item \(recordName)"), "rank": .int64(Int64(model.serial))])
        if let parent { record.parent = recordID(parent, zone: zone) }
        let handle = as_(model.zones[zone].owner)
        if await call("saveRecord", .success, "create record \(recordName)", { () async throws(LedgerError) in
            try await handle.save(record)
        }) != nil {
            model.zones[zone].records.append(SimRecord(name: recordName, parent: parent))
        }
        return true
    }

    /// The owner fetches a record, changes it and saves it; with `stale`, then saves the copy it
    /// fetched first again (a lost update that the change tag catches).
    mutating func editRecord(stale: Bool) async -> Bool {
        let zones = model.liveZones.filter { !model.zones[$0].records.isEmpty }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let record = model.zones[zone].records.randomElement(using: &rng)!.name
        let handle = as_(model.zones[zone].owner)
        let id = recordID(record, zone: zone)
        guard let fetched = await call("fetchRecord", .success, "fetch own record \(record)", { () throws(LedgerError) in
            try handle.record(for: id)
        }) else { return true }
        var changed = fetched
        changed["note"] = .string("edited \(model.nextSerial())")
        _ = await call("saveRecord", .success, "save own record \(record)") { () async throws(LedgerError) in
            try await handle.save(changed)
        }
        if stale {
            var lost = fetched
            lost["note"] = .string("lost update")
            _ = await call("saveRecord", .failure(.serverRecordChanged), "save \(record) with a stale change tag") {
                () async throws(LedgerError) in try await handle.save(lost)
            }
        }
        return true
    }

    /// The owner deletes a record with no children; deleting a share's root deletes the share.
    mutating func deleteRecord() async -> Bool {
        let candidates = model.liveZones.flatMap { zone in
            model.zones[zone].records.filter { !model.zones[zone].hasChildren($0.name) }.map { (zone, $0.name) }
        }
        guard let (zone, record) = candidates.randomElement(using: &rng) else { return false }
        let handle = as_(model.zones[zone].owner)
        let id = recordID(record, zone: zone)
        guard await call("deleteRecord", .success, "delete record \(record)", { () async throws(LedgerError) in
            try await handle.deleteRecord(withID: id)
        }) != nil else { return true }
        model.zones[zone].records.removeAll { $0.name == record }
        if let share = model.zones[zone].share, model.shares[share].root == record { model.killShare(share) }
        return true
    }

    mutating func deleteZone() async -> Bool {
        // Keep most zones: deleting one with many records throws away the work of the run.
        guard model.liveZones.count > 4, let zone = model.liveZones.randomElement(using: &rng) else { return false }
        let handle = as_(model.zones[zone].owner)
        let zoneID = RecordZoneID(zoneName: model.zones[zone].name)
        guard await call("deleteRecordZone", .success, "delete zone \(zoneID.zoneName)", { () async throws(LedgerError) in
            try await handle.deleteRecordZone(withID: zoneID)
        }) != nil else { return true }
        if let share = model.zones[zone].share { model.killShare(share) }
        model.zones[zone].live = false
        model.zones[zone].records = []
        return true
    }

    private mutating func randomPublicPermission() -> Permission {
        let x = Double.random(in: 0..<1, using: &rng)
        return x < 0.75 ? .none : x < 0.9 ? .readOnly : .readWrite
    }

    mutating func shareHierarchy() async -> Bool {
        let zones = model.liveZones.filter { model.zones[$0].share == nil && !model.zones[$0].records.isEmpty }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let root = model.zones[zone].records.randomElement(using: &rng)!.name
        let permission = randomPublicPermission()
        let title = ["Groceries", "Road trip", "Book club", "Nora's log", "Garden"].randomElement(using: &rng)!
        let handle = as_(model.zones[zone].owner)
        let id = recordID(root, zone: zone)
        guard let share = await call("shareRecord", .success, "share record \(root)", { () async throws(LedgerError) in
            try await handle.share(rootRecord: id, title: title, publicPermission: permission)
        }) else { return true }
        if share.hierarchicalRootRecordID?.recordName != root || share.publicPermission != permission {
            mismatch("the share of \(root) came back with root \(String(describing: share.hierarchicalRootRecordID)), public \(share.publicPermission)")
        }
        _ = model.addShare(
            SimShare(
                token: share.token.text, url: share.url, owner: model.zones[zone].owner, zone: zone, root: root,
                publicPermission: permission, title: title))
        return true
    }

    mutating func shareZone() async -> Bool {
        let zones = model.liveZones.filter { model.zones[$0].share == nil }
        guard let zone = zones.randomElement(using: &rng) else { return false }
        let permission = randomPublicPermission()
        let handle = as_(model.zones[zone].owner)
        let zoneID = RecordZoneID(zoneName: model.zones[zone].name)
        guard let share = await call("shareZone", .success, "share zone \(zoneID.zoneName)", { () async throws(LedgerError) in
            try await handle.share(recordZoneID: zoneID, title: "Everything in \(zoneID.zoneName)", publicPermission: permission)
        }) else { return true }
        if !share.isZoneWide { mismatch("the zone-wide share of \(zoneID.zoneName) is not zone-wide") }
        _ = model.addShare(
            SimShare(
                token: share.token.text, url: share.url, owner: model.zones[zone].owner, zone: zone, root: nil,
                publicPermission: permission, title: share.title ?? ""))
        return true
    }
}
