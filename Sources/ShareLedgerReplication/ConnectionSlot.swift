import Foundation
import Synchronization

/// A NATS connection made on first use (and prepared, e.g. its stream created) and shared until it
/// is closed or dropped after an error.
final class ConnectionSlot: Sendable {
    private let slot = Mutex<NATSConnection?>(nil)
    private let servers: [String]
    private let name: String
    private let wait: Duration

    init(servers: [String], name: String, wait: Duration) {
        self.servers = servers
        self.name = name
        self.wait = wait
    }

    /// The connection, connected and prepared now when there is none.
    func get(
        prepare: (NATSConnection) async throws(ReplicationError) -> Void = { _ in }
    ) async throws(ReplicationError) -> NATSConnection {
        if let connection = slot.withLock({ $0 }) { return connection }
        let connection = try await NATSConnection.connect(servers: servers, name: name, wait: wait)
        do {
            try await prepare(connection)
        } catch {
            connection.close()
            throw error
        }
        slot.withLock { $0 = connection }
        return connection
    }

    /// Closes the connection; the next ``get(prepare:)`` connects anew.
    func close() {
        let connection = slot.withLock { slot in
            defer { slot = nil }
            return slot
        }
        connection?.close()
    }
}
