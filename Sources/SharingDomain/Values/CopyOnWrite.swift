/// A value's stored fields in one heap box, copied on the first change of a box two values share:
/// for the public values that answers pass around many times (``Share``, ``Share/Participant``,
/// ``Share/Metadata``), a copy is one retain instead of a retain of every reference they hold, and a
/// move is one word instead of hundreds of bytes.
struct CopyOnWrite<Fields: Sendable>: Sendable {
    /// The box.
    private final class Box: @unchecked Sendable {
        // @unchecked: `fields` is only written through `CopyOnWrite.fields`'s modify accessor, after
        // `isKnownUniquelyReferenced` made the box the writer's own: a box two values share is only read.
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var box: Box

    init(_ fields: Fields) { box = Box(fields) }

    /// The fields; changing them copies them first when another value shares the box.
    var fields: Fields {
        get { box.fields }
        _modify {
            if !isKnownUniquelyReferenced(&box) { box = Box(box.fields) }
            yield &box.fields
        }
    }
}

/// Equal when the fields are equal: at once when both hold the very same box. The boxed values'
/// equality (and hashing) is this one's, synthesized.
extension CopyOnWrite: Equatable where Fields: Equatable {
    static func == (lhs: CopyOnWrite, rhs: CopyOnWrite) -> Bool { lhs.box === rhs.box || lhs.box.fields == rhs.box.fields }
}

/// Hashes the fields.
extension CopyOnWrite: Hashable where Fields: Hashable {
    func hash(into hasher: inout Hasher) { box.fields.hash(into: &hasher) }
}
