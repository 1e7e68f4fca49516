import EventLog
import Foundation

extension ParticipantState {
    /// The address the invitation went to, by keyed hash (sealed invitations only).
    package var address: AddressHash? { AddressHash.pair(email: emailHash, phone: phoneHash).first }
}

extension ParticipantState {
    /// Whether the row keeps its invitation's email address or phone number in plaintext (a row
    /// written before invitations were sealed, or by a store without a key store), not forgotten.
    package var hasPlaintextAddress: Bool {
        forgottenAtMicros == 0 && hasLookupInfo && (!lookupInfo.emailAddress.isEmpty || !lookupInfo.phoneNumber.isEmpty)
    }
}
