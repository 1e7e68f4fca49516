import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import ShareLedger
import TestSupport
import Testing

@testable import ShareLedgerReplication

/// The documented topology: `share-ledger serve --shard S --nats URLS`, the same command on three
/// nodes. Exactly one becomes the writer; writes sent to any node land once, in the stream and in
/// every replica; requests for a container of no shard or another shard are refused.
extension ReplicationTests {
    struct ServeNode {
        var name: String
        var path: String
        var process: ChildProcess
        var output: URL
    }

    /// The node's base URL, once it printed where it listens.
    func base(_ node: ServeNode) -> String? {
        jsonLines(node.output).compactMap { $0["listening"] as? String }.first
    }

    /// The node's last part in the shard (`standby`, `writer`, ...).
    func member(_ node: ServeNode) -> String? {
        jsonLines(node.output).compactMap { $0["shardMember"] as? String }.last
    }

    func post(_ client: HTTPClient, _ url: String, _ body: [String: Any], headers: [String: String] = [:]) async throws
        -> (status: Int, json: [String: Any])
    {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: Array(try JSONSerialization.data(withJSONObject: body))))
        let response = try await client.execute(request, timeout: .seconds(60))
        var bytes = try await response.body.collect(upTo: 1 << 20)
        let data = Data(bytes.readBytes(length: bytes.readableBytes) ?? [])
        return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:])
    }

    /// A shard `web` served by `names` on `cluster`, its container assigned (and a second container
    /// to shard `elsewhere`), once every node listens and exactly one is the writer; tokens made and
    /// copied as docs/operations.md says; the user registered on the writer's directory. Returns the
    /// nodes and the query carrying the tokens.
    func startShard(_ cluster: Cluster, _ names: [String], container: String) async throws -> (nodes: [ServeNode], query: String) {
        let urls = cluster.servers.joined(separator: ",")
        let directory = cluster.directory
        let assigned = try await run(["shard", "assign", container, "--to", "web", "--nats", urls, "--json"], in: directory)
        #expect(assigned.status == 0, "\(assigned.json)")
        let other = try await run(["shard", "assign", "iCloud.com.example.other", "--to", "elsewhere", "--nats", urls, "--json"], in: directory)
        #expect(other.status == 0, "\(other.json)")
        var nodes: [ServeNode] = []
        for name in names {
            let path = directory.child(name)
            let (process, output) = try launch(
                ["serve", "--path", path, "--port", "0", "--json", "--log-level", "critical", "--shard", "web", "--nats", urls,
                 "--holder", name, "--lease-seconds", "2"], in: directory)
            nodes.append(ServeNode(name: name, path: path, process: process, output: output))
        }
        try await until("every node listens and one is the writer, the others standing by") {
            for node in nodes where !node.process.isRunning {
                throw ClusterError(text: "serve on \(node.name) exited: \((try? String(contentsOf: node.output, encoding: .utf8)) ?? "")")
            }
            let parts = nodes.map(member)
            return nodes.allSatisfy { base($0) != nil } && parts.filter { $0 == "writer" }.count == 1
                && parts.filter { $0 == "standby" }.count == names.count - 1
        }
        let writer = try #require(nodes.first { member($0) == "writer" })
        // Tokens made once the nodes created their ledgers, the credentials file copied to every node
        // (each reads it again when it changes).
        let first = nodes[0].path
        let api = try await run(["token", "create", "--container", container, "--path", first, "--json"], in: directory)
        let web = try await run(["token", "create", "--container", container, "--user", "_alice", "--path", first, "--json"], in: directory)
        let query = "?ckAPIToken=\(try #require(api.json["token"] as? String))&ckWebAuthToken=\(try #require(web.json["token"] as? String))"
        for node in nodes.dropFirst() {
            let copy = "\(node.path)/server-credentials.json"
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: "\(first)/server-credentials.json", toPath: copy)
        }
        // The user is registered on the writer's directory (as an application beside it would).
        let registered = try await run(
            ["user", "register", "_alice", "--container", container, "--path", writer.path, "--json"], in: directory)
        #expect(registered.status == 0, "\(registered.json)")
        return (nodes, query)
    }

    /// Waits until every node reads the copied credentials (within a second of the change).
    func untilCredentialsKnown(_ client: HTTPClient, _ nodes: [ServeNode], _ url: (ServeNode) throws -> String) async throws {
        for node in nodes {
            try await until("\(node.name) knows the copied credentials") {
                try await post(client, try url(node), [:]).status != 404
            }
        }
    }

    @Test func serveShardHasOneWriterAndWritesToAnyNodeLand() async throws {
        let cluster = try await Cluster()
        let urls = cluster.servers.joined(separator: ",")
        let container = "iCloud.com.example.serveshard"
        let directory = cluster.directory
        let (started, query) = try await startShard(cluster, ["n1", "n2", "n3"], container: container)
        var nodes = started
        defer { for node in nodes where node.process.isRunning { node.process.send(SIGKILL) } }
        let writer = try #require(nodes.first { member($0) == "writer" })
        let roles = try nodes.map { try LedgerRole.read(at: $0.path) }
        #expect(roles.filter { if case .writer = $0 { return true } else { return false } }.count == 1, "\(roles)")
        #expect(roles.filter { $0 == .replica(shard: "web") }.count == 2, "\(roles)")

        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        func database(_ node: ServeNode, _ subpath: String, container: String = container) throws -> String {
            "\(try #require(base(node)))/database/1/\(container)/development/private/\(subpath)\(query)"
        }
        do {
            try await untilCredentialsKnown(client, nodes) { try database($0, "zones/list") }
            // A write to every node, the replicas' forwarded to the writer.
            for node in nodes {
                let created = try await post(
                    client, try database(node, "zones/modify"),
                    ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z-\(node.name)"]]]]])
                #expect(created.status == 200, "\(node.name): \(created.json)")
                let zones = created.json["zones"] as? [[String: Any]] ?? []
                #expect(zones.count == 1 && zones.first?["serverErrorCode"] == nil, "\(node.name): \(created.json)")
            }
            // A request marked forwarded that reaches a replica is neither written there nor sent on.
            let standby = try #require(nodes.first { member($0) == "standby" })
            let marked = try await post(
                client, try database(standby, "zones/modify"),
                ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z-marked"]]]]],
                headers: ["X-ShareLedger-Forwarded": "1"])
            #expect(marked.status == 503, "\(marked.json)")
            #expect((marked.json["reason"] as? String)?.contains("not the writer of shard web") == true, "\(marked.json)")
            // Containers of no shard and of another shard are refused, by every node.
            for node in nodes {
                let unassigned = try await post(
                    client, try database(node, "zones/list", container: "iCloud.com.example.unassigned"), [:])
                #expect(unassigned.status == 400, "\(unassigned.json)")
                #expect((unassigned.json["reason"] as? String)?.contains("not assigned to shard web") == true, "\(unassigned.json)")
                let elsewhere = try await post(client, try database(node, "zones/list", container: "iCloud.com.example.other"), [:])
                #expect(elsewhere.status == 400, "\(elsewhere.json)")
                #expect((elsewhere.json["reason"] as? String)?.contains("belongs to shard elsewhere") == true, "\(elsewhere.json)")
            }
            // Every replica serves the three zones from its own ledger once it applied them.
            let names: Set<String> = ["Z-n1", "Z-n2", "Z-n3"]
            for node in nodes {
                try await until("\(node.name) lists the three zones") {
                    let listed = try await post(client, try database(node, "zones/list"), [:])
                    let zones = (listed.json["zones"] as? [[String: Any]] ?? []).compactMap {
                        ($0["zoneID"] as? [String: Any])?["zoneName"] as? String
                    }
                    return names.isSubset(of: Set(zones))
                }
            }

            // kill -9 of the writer: another node takes over, a write sent to a replica lands once it
            // has (503 TRY_AGAIN_LATER meanwhile, nothing written), and the killed node, started again
            // with the same command, stands by.
            let killed = try #require(nodes.firstIndex { $0.name == writer.name })
            let pid = try #require(jsonLines(writer.output).compactMap { $0["pid"] as? Int }.first)
            kill(pid_t(pid), SIGKILL)
            _ = await nodes[killed].process.exit()
            let survivors = nodes.indices.filter { $0 != killed }
            try await until("a survivor took over") { survivors.contains { member(nodes[$0]) == "writer" } }
            let replica = try #require(survivors.first { member(nodes[$0]) == "standby" })
            var answer: (status: Int, json: [String: Any]) = (0, [:])
            try await until("a write to the replica lands after the takeover") {
                answer = try await post(
                    client, try database(nodes[replica], "zones/modify"),
                    ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z-after"]]]]])
                guard answer.status == 503 else { return true }
                #expect(answer.json["serverErrorCode"] as? String == "TRY_AGAIN_LATER", "\(answer.json)")
                return false
            }
            #expect(answer.status == 200, "\(answer.json)")
            let restartOutput = directory.url.appendingPathComponent("restart-\(writer.name).json")
            let restarted = try ChildProcess(
                builtProduct("share-ledger"),
                ["serve", "--path", writer.path, "--port", "0", "--json", "--log-level", "critical", "--shard", "web", "--nats",
                 urls, "--holder", writer.name, "--lease-seconds", "2"], stdout: restartOutput.path)
            nodes[killed] = ServeNode(name: writer.name, path: writer.path, process: restarted, output: restartOutput)
            try await until("the restarted node stands by") { member(nodes[killed]) == "standby" && base(nodes[killed]) != nil }
            try await until("the restarted node lists the zone written after its death") {
                let listed = try await post(client, try database(nodes[killed], "zones/list"), [:])
                return (listed.json["zones"] as? [[String: Any]] ?? []).contains {
                    ($0["zoneID"] as? [String: Any])?["zoneName"] as? String == "Z-after"
                }
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()

        // The stream holds each zone's creation exactly once, and every node's ledger is its prefix.
        let check = directory.child("check")
        let followed = try await run(["follow", "--path", check, "--nats", urls, "--shard", "web", "--once", "--json"], in: directory)
        #expect(followed.status == 0, "\(followed.json)")
        let stream = try Ledgers.open(check)
        let events = try stream.log.events(after: .start, limit: 100_000)
        let created = events.filter { $0.eventType == "shareledger.events.v1.ZoneCreated" }
        #expect(created.count == 4, "\(created.map(\.eventType))")
        #expect(events.filter { $0.eventType == TermMarker.eventType }.count == 2)
        let streamHead = try stream.log.head()
        await stream.close()

        for node in nodes { node.process.send(SIGTERM) }
        for node in nodes {
            let ended = await node.process.exit()
            #expect(ended.exited(0), "\(node.name): \(ended.summary)")
        }
        for node in nodes {
            let ledger = try Ledgers.open(node.path)
            let head = try ledger.log.head()
            let event = try ledger.log.storedEvent(at: head.position)
            await ledger.close()
            #expect(head.position <= streamHead.position, "\(node.name)")
            let streamLedger = try Ledgers.open(check)
            #expect(try streamLedger.log.storedEvent(at: head.position)?.bytes == event?.bytes, "\(node.name) forked")
            await streamLedger.close()
        }
    }

    /// The writer's `serve` stopped (SIGSTOP) for longer than its lease: the other node takes over;
    /// resumed (SIGCONT), the old writer finds its lease lost, re-joins as a replica by itself, stands
    /// by, and forwards a write that lands.
    @Test func pausedServeWriterRejoinsAsAReplica() async throws {
        let cluster = try await Cluster()
        let container = "iCloud.com.example.servepause"
        let (nodes, query) = try await startShard(cluster, ["n1", "n2"], container: container)
        defer { for node in nodes where node.process.isRunning { node.process.send(SIGKILL) } }
        let old = try #require(nodes.firstIndex { member($0) == "writer" })
        let other = 1 - old
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        func database(_ node: ServeNode, _ subpath: String) throws -> String {
            "\(try #require(base(node)))/database/1/\(container)/development/private/\(subpath)\(query)"
        }
        do {
            try await untilCredentialsKnown(client, nodes) { try database($0, "zones/list") }
            let pid = pid_t(try #require(jsonLines(nodes[old].output).compactMap { $0["pid"] as? Int }.first))
            kill(pid, SIGSTOP)
            try await until("the other node took over") { member(nodes[other]) == "writer" }
            kill(pid, SIGCONT)
            try await until("the old writer stands by again") {
                let parts = jsonLines(nodes[old].output).compactMap { $0["shardMember"] as? String }
                return parts.last == "standby" && parts.contains("writer")
            }
            #expect(try LedgerRole.read(at: nodes[old].path) == .replica(shard: "web"))
            let created = try await post(
                client, try database(nodes[old], "zones/modify"),
                ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z-resumed"]]]]])
            #expect(created.status == 200, "\(created.json)")
            #expect((created.json["zones"] as? [[String: Any]])?.first?["serverErrorCode"] == nil, "\(created.json)")
            try await until("the old writer lists the zone it forwarded") {
                let listed = try await post(client, try database(nodes[old], "zones/list"), [:])
                return (listed.json["zones"] as? [[String: Any]] ?? []).contains {
                    ($0["zoneID"] as? [String: Any])?["zoneName"] as? String == "Z-resumed"
                }
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
        for node in nodes { node.process.send(SIGTERM) }
        for node in nodes {
            let ended = await node.process.exit()
            #expect(ended.exited(0), "\(node.name): \(ended.summary)")
        }
    }
}
