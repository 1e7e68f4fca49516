import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A `/database/1/...` request as it is sent on to another node (`share-ledger serve --shard`: a
/// replica sends the writes it receives to its shard's writer, which answers them as if they had
/// come to it).
public struct ForwardedRequest: Sendable, Hashable, Codable {
    /// The HTTP method.
    public var method: String
    /// The path and query, as received (tokens in the query included: the writer checks them again).
    public var uri: String
    /// The headers the server reads: the content type and a server-to-server signature's three.
    public var headers: [String: String]
    /// The body, at most the receiving server's limit.
    public var body: [UInt8]

    /// Makes a request.
    public init(method: String, uri: String, headers: [String: String], body: [UInt8]) {
        self.method = method
        self.uri = uri
        self.headers = headers
        self.body = body
    }

    /// The header a forwarded request carries, so that it is never forwarded again: the node it
    /// reaches answers it itself when it is still the writer, and refuses it otherwise (the client retries).
    public static let forwardedHeader = "X-ShareLedger-Forwarded"

    /// The headers kept (compared case-insensitively): the content type and the signature's.
    public static let keptHeaders = [
        "Content-Type", "X-Apple-CloudKit-Request-KeyID", "X-Apple-CloudKit-Request-ISO8601Date",
        "X-Apple-CloudKit-Request-SignatureV1",
    ]
}

/// The framing a forwarded request or answer travels in: 4 bytes (big-endian) of JSON length, the
/// JSON of everything but the body, then the body as it is (no base64: a forwarded body may be as
/// large as the transport's limit allows).
enum ForwardFraming {
    static func encode<Head: Encodable>(_ head: Head, body: [UInt8]) -> [UInt8] {
        let json = Array((try? JSONEncoder().encode(head)) ?? Data())
        let count = UInt32(json.count)
        return [UInt8(count >> 24), UInt8((count >> 16) & 0xFF), UInt8((count >> 8) & 0xFF), UInt8(count & 0xFF)] + json + body
    }

    static func decode<Head: Decodable>(_ type: Head.Type, _ bytes: [UInt8]) -> (Head, [UInt8])? {
        guard bytes.count >= 4 else { return nil }
        let count = Int(bytes[0]) << 24 | Int(bytes[1]) << 16 | Int(bytes[2]) << 8 | Int(bytes[3])
        guard bytes.count >= 4 + count, let head = try? JSONDecoder().decode(type, from: Data(bytes[4..<(4 + count)])) else { return nil }
        return (head, Array(bytes[(4 + count)...]))
    }
}

extension ForwardedRequest {
    private struct Head: Codable {
        var method: String
        var uri: String
        var headers: [String: String]
    }

    /// The request as it travels (see ``init(encoded:)``).
    public var encoded: [UInt8] { ForwardFraming.encode(Head(method: method, uri: uri, headers: headers), body: body) }

    /// The request ``encoded`` holds; nil when `bytes` are not one.
    public init?(encoded bytes: [UInt8]) {
        guard let (head, body) = ForwardFraming.decode(Head.self, bytes) else { return nil }
        self.init(method: head.method, uri: head.uri, headers: head.headers, body: body)
    }
}

extension ForwardedResponse {
    private struct Head: Codable {
        var status: Int
        var contentType: String
    }

    /// The answer as it travels (see ``init(encoded:)``).
    public var encoded: [UInt8] { ForwardFraming.encode(Head(status: status, contentType: contentType), body: body) }

    /// The answer ``encoded`` holds; nil when `bytes` are not one.
    public init?(encoded bytes: [UInt8]) {
        guard let (head, body) = ForwardFraming.decode(Head.self, bytes) else { return nil }
        self.init(status: head.status, contentType: head.contentType, body: body)
    }
}

/// The answer to a ``ForwardedRequest``, as the node that answered it sent it.
public struct ForwardedResponse: Sendable, Hashable, Codable {
    /// The HTTP status.
    public var status: Int
    /// The content type.
    public var contentType: String
    /// The body.
    public var body: [UInt8]

    /// Makes an answer.
    public init(status: Int, contentType: String = "application/json; charset=utf-8", body: [UInt8]) {
        self.status = status
        self.contentType = contentType
        self.body = body
    }

    /// An error answer in CloudKit Web Services' shape: `TRY_AGAIN_LATER` (503) when `retry`,
    /// `BAD_REQUEST` (400) otherwise, with `reason` (no personal data).
    public static func error(retry: Bool, _ reason: String) -> ForwardedResponse {
        let error = WireError(retry ? .tryAgainLater : .badRequest, reason)
        return ForwardedResponse(status: error.status, body: error.dictionary(uuid: nil).bytes)
    }
}

/// Where a server sends the `/database/1/...` requests it should not answer itself (a member of a
/// shard: requests for another shard's containers are refused, writes on a replica go to the writer).
public protocol RequestRouting: Sendable {
    /// What to do with a request, before its credentials are checked (the node that answers checks them).
    func route(container: String, subpath: String, method: String, forwarded: Bool) async -> RouteDecision
    /// Sends a request on and returns the answer to give (an error answer when it could not be sent).
    func forward(_ request: ForwardedRequest, container: String) async -> ForwardedResponse
}

/// What ``RequestRouting`` decided for a request.
public enum RouteDecision: Sendable, Hashable {
    /// This server answers it.
    case local
    /// ``RequestRouting/forward(_:container:)`` answers it.
    case forward
    /// It is answered with this (a container of another shard, say).
    case answer(ForwardedResponse)
}

extension ServerResponder {
    /// The routing's answer to a `/database/1/...` request, or nil when this server answers it.
    func routed(_ request: Request, path: DatabasePath, routing: any RequestRouting) async -> Response? {
        let forwarded = request.headers[HTTPField.Name(ForwardedRequest.forwardedHeader)!] != nil
        let decision = await routing.route(
            container: path.container, subpath: path.subpath, method: request.method.rawValue, forwarded: forwarded)
        let answer: ForwardedResponse
        switch decision {
        case .local:
            return nil
        case .answer(let response):
            answer = response
        case .forward:
            let limit = handler.server.configuration.maxBodyBytes
            // A body announced larger than the limit gets the server's own 413 (which ends the connection).
            if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > limit { return nil }
            var bytes: [UInt8] = []
            do {
                var buffer = try await request.body.collect(upTo: limit)
                bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
            } catch {
                let error = WireError(.badRequest, "the request body is larger than \(limit) bytes; split the request", status: 413)
                return LedgerServer.json(413, error.dictionary(uuid: nil))
            }
            var headers: [String: String] = [:]
            for name in ForwardedRequest.keptHeaders {
                if let field = HTTPField.Name(name), let value = request.headers[field] { headers[name] = value }
            }
            answer = await routing.forward(
                ForwardedRequest(method: request.method.rawValue, uri: request.uri.description, headers: headers, body: bytes),
                container: path.container)
        }
        var headers = HTTPFields()
        headers[.contentType] = answer.contentType
        return Response(
            status: HTTPResponse.Status(code: answer.status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: answer.body)))
    }
}
