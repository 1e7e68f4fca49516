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

    /// Whether `other` holds the very same box (so the same fields, without comparing them).
    func isShared(with other: CopyOnWrite) -> Bool { box === other.box }
}
