/// An error of the server's own (its credentials file, its configuration), with a code and a message
/// that says what to do; never personal data or a token.
public struct ServerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The code's name.
        public let rawValue: String
        /// Makes a code.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// The code's name.
        public var description: String { rawValue }

        /// An argument is out of range or malformed.
        public static let invalidArguments = Code(rawValue: "invalidArguments")
        /// No credential has the id given.
        public static let unknownCredential = Code(rawValue: "unknownCredential")
        /// The credentials file cannot be read or written.
        public static let unreadableFile = Code(rawValue: "unreadableFile")
    }

    /// What kind of failure.
    public var code: Code
    /// What failed and what to do about it.
    public var message: String

    /// Makes an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The code and the message.
    public var description: String { "\(code): \(message)" }
}
