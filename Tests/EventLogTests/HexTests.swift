import EventLog
import Testing

/// The package's one hexadecimal encoding and decoding.
@Suite struct HexTests {
    @Test func encodesLowercaseTwoDigitsPerByte() {
        #expect(Hex.encode([0x00, 0x0f, 0xa5, 0xff]) == "000fa5ff")
        #expect(Hex.encode([UInt8]()) == "")
        #expect(Hex.encode("c1".utf8) == "6331")
    }

    @Test func decodesWhatItEncodes() {
        let bytes = (0...255).map { UInt8($0) }
        #expect(Hex.decode(Array(Hex.encode(bytes).utf8)) == bytes)
    }

    @Test func refusesOddCountsOtherCharactersAndUppercaseWhenAsked() {
        #expect(Hex.decode(Array("abc".utf8)) == nil)
        #expect(Hex.decode(Array("0g".utf8)) == nil)
        #expect(Hex.decode(Array("AB".utf8)) == [0xab])
        #expect(Hex.decode(Array("AB".utf8), allowingUppercase: false) == nil)
    }

    @Test func eventHashesParseEitherCase() {
        let hash = EventHash(bytes: (0..<32).map { UInt8($0 * 7) })!
        #expect(EventHash(hex: hash.hex) == hash)
        #expect(EventHash(hex: hash.hex.uppercased()) == hash)
        #expect(EventHash(hex: String(hash.hex.dropLast())) == nil)
    }
}
