import EventLog
import Foundation

/// Reading one field of a serialized protobuf message without decoding the message.
package enum ProtobufScan {
    /// The value of the top-level varint field `field` (the last one, as protobuf merges), 0 when
    /// the field is absent (proto3's default), nil when the bytes are not a well-formed message.
    package static func varint(field: UInt64, in bytes: UnsafeRawBufferPointer) -> UInt64? {
        var found: UInt64 = 0
        let wellFormed = walk(bytes) { number, value in
            if number == field, case .varint(let v) = value { found = v }
        }
        return wellFormed ? found : nil
    }

    /// The bytes of the top-level length-delimited field `field` (a string or bytes; the last one, as
    /// protobuf keeps), empty when the field is absent, nil when the bytes are not a well-formed
    /// message.
    package static func lengthDelimited(field: UInt64, in bytes: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        var found = UnsafeRawBufferPointer(rebasing: bytes[0..<0])
        let wellFormed = walk(bytes) { number, value in
            if number == field, case .lengthDelimited(let v) = value { found = v }
        }
        return wellFormed ? found : nil
    }

    /// A top-level field's value, as far as these scans read it.
    private enum Value {
        case varint(UInt64)
        case lengthDelimited(UnsafeRawBufferPointer)
        case fixed
    }

    /// Calls `body` with each top-level field's number and value, in order; returns whether the
    /// bytes are a well-formed message (on false, `body` may have seen some fields).
    private static func walk(_ bytes: UnsafeRawBufferPointer, _ body: (UInt64, Value) -> Void) -> Bool {
        var offset = 0
        func readVarint() -> UInt64? { EnvelopeCodec.readVarint(bytes, &offset, limit: bytes.count) }
        while offset < bytes.count {
            guard let tag = readVarint() else { return false }
            switch tag & 7 {
            case 0:
                guard let value = readVarint() else { return false }
                body(tag >> 3, .varint(value))
            case 1:
                offset += 8
                body(tag >> 3, .fixed)
            case 2:
                guard let length = readVarint(), length <= UInt64(bytes.count - offset) else { return false }
                body(tag >> 3, .lengthDelimited(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + Int(length)])))
                offset += Int(length)
            case 5:
                offset += 4
                body(tag >> 3, .fixed)
            default: return false
            }
            if offset > bytes.count { return false }
        }
        return true
    }
}
