import EventLog
import Foundation

extension ParticipantState {
    /// The address the invitation went to, by keyed hash (sealed invitations only).
    package var address: AddressHash? { AddressHash.pair(email: emailHash, phone: phoneHash).first }
}
