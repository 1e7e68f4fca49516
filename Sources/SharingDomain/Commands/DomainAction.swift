import EventLog
import Foundation

/// One step of a domain command: what a caller asks the ledger to do. The writer decides each step
/// against the read models inside its transaction and, if the step is allowed, appends its events
/// and applies them before it decides the next step, so later steps see earlier ones.
package enum DomainAction: Sendable {
    case registerUser(name: String, email: String?, phone: String?, names: PersonNameComponents?)
    case saveZone(RecordZoneID, capabilities: UInt32)
    case deleteZone(RecordZoneID)
    /// `record.recordChangeTag` is the tag the caller last saw (nil for a new record).
    case saveRecord(Record)
    /// A save as the policy says (``RecordSavePolicy``).
    case saveRecordWithPolicy(Record, RecordSavePolicy)
    case deleteRecord(RecordID)
    /// A deletion that checks the record's change tag.
    case deleteRecordIfUnchanged(RecordID, changeTag: String)
    case createShare(ShareCreation)
    case addParticipant(token: String, lookup: LookupInfo, role: Share.Participant.Role,
        permission: Share.Participant.Permission, newParticipantID: String, ifChangeTag: String?)
    case updateParticipant(token: String, participantID: String, role: Share.Participant.Role?,
        permission: Share.Participant.Permission, ifChangeTag: String?)
    case removeParticipant(token: String, participantID: String, ifChangeTag: String?)
    case leaveShare(token: String)
    case setPublicPermission(token: String, permission: Share.Participant.Permission, ifChangeTag: String?)
    case setTitle(token: String, title: String, ifChangeTag: String?)
    case deleteShare(token: String, ifChangeTag: String?)
    case fetchMetadata(tokenText: String, shouldFetchRootRecord: Bool, desiredKeys: [String]?)
    case accept(token: String, metadataContainer: String, newParticipantID: String)
    case requestVerification(token: String, lookup: LookupInfo, codeSHA256: [UInt8], expiresAtMicros: Int64)
    case verify(token: String, codeSHA256: [UInt8])
    /// CloudKit's `CKFetchShareParticipantsOperation`, one lookup info.
    case lookupParticipant(LookupInfo)
    case completeTask(taskID: UInt64)
    /// CloudKit's `CKShare.allowsAccessRequests`, saved with the share.
    case setAllowsAccessRequests(token: String, allowed: Bool, ifChangeTag: String?)
    /// CloudKit's `CKShareRequestAccessOperation`, one URL (its token text, as given).
    case requestAccess(tokenText: String)
    /// Approves a pending access request: invites the requester (`isApprovedRequester`).
    case approveRequester(token: String, user: String, permission: Share.Participant.Permission, newParticipantID: String)
    /// CloudKit's `denyRequesters(_:)`, one requester.
    case denyRequester(token: String, user: String)
    /// CloudKit's `blockRequesters(_:)`, one identity.
    case blockIdentity(token: String, user: String)
    /// CloudKit's `unblockIdentities(_:)`, one identity.
    case unblockIdentity(token: String, user: String)
    /// Adding CloudKit's `Participant.oneTimeURLParticipant()`: an invitation reached by a one-time URL.
    case addOneTimeParticipant(
        token: String, role: Share.Participant.Role, permission: Share.Participant.Permission, newParticipantID: String,
        oneTimeToken: String, ifChangeTag: String?)
    /// Accepting through a one-time URL (the metadata was fetched with it).
    case acceptOneTimeURL(oneTimeToken: String, token: String, metadataContainer: String)
    /// An erasure request: forget the personal data of user `name` (crypto-shredding).
    case forgetUser(name: String)
    /// An erasure request for an email address or phone number no user registered with: forget what
    /// invitations and lookups hold of it (crypto-shredding).
    case forgetAddress(LookupInfo)

    /// A rough size, for bounding a group commit.
    package var approximateBytes: Int {
        switch self {
        case .saveRecord(let record), .saveRecordWithPolicy(let record, _): return 256 + record.approximateFieldBytes
        default: return 256
        }
    }
}

package struct ShareCreation: Sendable {
    package var zoneID: RecordZoneID
    /// The root record's name for a hierarchy share; nil for a zone-wide share.
    package var rootRecordName: String?
    package var title: String
    package var publicPermission: Share.Participant.Permission
    /// Used unless the root (or zone) was shared before: then its old token comes back (stable URL).
    package var tokenCandidate: String
    package var shareRecordName: String
    package var ownerParticipantID: String

    /// Makes the value from its fields.
    package init(
        zoneID: RecordZoneID, rootRecordName: String?, title: String, publicPermission: Share.Participant.Permission,
        tokenCandidate: String, shareRecordName: String, ownerParticipantID: String
    ) {
        self.zoneID = zoneID
        self.rootRecordName = rootRecordName
        self.title = title
        self.publicPermission = publicPermission
        self.tokenCandidate = tokenCandidate
        self.shareRecordName = shareRecordName
        self.ownerParticipantID = ownerParticipantID
    }
}

/// What a step gives back to its caller.
package enum StepOutput: Sendable {
    case none
    case user(UserIdentity)
    case zone(RecordZone)
    case record(Record)
    case share(Share)
    case metadata(Share.Metadata)
    case participantID(String)
    /// A participant found by a lookup, not in any share yet.
    case participant(Share.Participant)
}

/// What a step gives its caller, as data: either complete now, or which read-model row to present
/// after the commit (by the facade's presenter, in the caller's own read
/// transaction, not on the writer thread: the writer's time goes to deciding and applying only).
package enum StepAnswer: Sendable {
    /// The answer itself (no row to read). Indirect: a `StepOutput` is over a kilobyte inline (share
    /// metadata), and every answer is moved through the writer's results; the other cases are small.
    indirect case output(StepOutput)
    /// The identity of a user of the command's container.
    case user(name: String)
    /// A zone of the command's container.
    case zone(owner: String, zoneName: String)
    /// A record, by its zone's key and its name; `id` is how the caller named it.
    case record(zoneKey: UInt64, name: String, id: RecordID)
    /// A share, as the command's actor may see it.
    case share(token: String)
    /// A share's metadata, as the command's actor (a signed-in user of the command's container)
    /// fetched it: built after the commit by the caller, possibly from a kept answer, so the writer
    /// spends no time on it. `standing` is the caller's standing the fetch decided on (nil when it
    /// came by a one-time URL): the answer reports it while the share's change tag is still its
    /// `share.changeTag`, and otherwise works it out again (``Decider/metadataStanding(_:tokenText:)``).
    case metadata(token: String, fetchRoot: Bool, keys: [String]?, standing: MetadataStanding?)
    /// A participant found by a lookup, not in any share yet: the account `user` of the command's
    /// container, found by `lookup`.
    case lookedUpParticipant(user: String, lookup: LookupInfo)
}

/// The outcome of deciding a step: the events to append and, once they are applied, what to return.
package struct Decision {
    package var events: [PendingEvent]
    package var outcome: Outcome

    package enum Outcome {
        /// What to answer the caller, after the commit.
        case answer(StepAnswer)
        /// The step failed (its events, if any, still record the attempt: a failed metadata fetch).
        case failed(LedgerError)
    }

    package static func output(_ events: [PendingEvent], _ answer: StepAnswer) -> Decision {
        Decision(events: events, outcome: .answer(answer))
    }

    package static func output(_ answer: StepAnswer) -> Decision {
        Decision(events: [], outcome: .answer(answer))
    }

    package static func output(_ events: [PendingEvent], _ value: StepOutput) -> Decision {
        Decision(events: events, outcome: .answer(.output(value)))
    }

    package static func output(_ value: StepOutput) -> Decision {
        Decision(events: [], outcome: .answer(.output(value)))
    }

    /// Makes the value from its fields.
    package init(events: [PendingEvent], outcome: Outcome) {
        self.events = events
        self.outcome = outcome
    }
}

/// A command of the sharing domain, as submitted to the writer.
package struct DomainCommand: Sendable {
    package var metadata: CommandMetadata
    /// Whether the actor is a signed-in user (false: a caller with no account).
    package var signedIn: Bool
    package var steps: [DomainAction]
    package var bytes: Int
    /// All or nothing: when one step fails, none of the command's steps changes anything and the
    /// ones that would have succeeded answer `batchRequestFailed` (CloudKit's atomic zones).
    package var atomic = false

    /// Makes the value from its fields.
    package init(metadata: CommandMetadata, signedIn: Bool, steps: [DomainAction], bytes: Int, atomic: Bool = false) {
        self.metadata = metadata
        self.signedIn = signedIn
        self.steps = steps
        self.bytes = bytes
        self.atomic = atomic
    }
}

/// What a domain command did: one result per step, in order.
package struct DomainOutcome: Sendable {
    package var results: [Result<StepAnswer, LedgerError>]
    /// The positions of the events the command appended (nil when it appended none).
    package var positions: ClosedRange<LogPosition>?

    /// Makes the value from its fields.
    package init(results: [Result<StepAnswer, LedgerError>], positions: ClosedRange<LogPosition>?) {
        self.results = results
        self.positions = positions
    }
}

extension Record {
    package var approximateFieldBytes: Int {
        fields.reduce(0) { $0 + $1.key.utf8.count + $1.value.approximateBytes }
    }
}

extension FieldValue {
    package var approximateBytes: Int {
        switch self {
        case .string(let s): return s.utf8.count + 2
        case .int64, .double, .date: return 9
        case .bytes(let b): return b.count + 2
        case .reference(let id): return id.recordName.utf8.count + 4
        case .list(let values): return values.reduce(2) { $0 + $1.approximateBytes }
        }
    }
}

extension Share.Participant {
    /// A participant found by a lookup (`identity`), not in any share yet.
    package init(lookedUp identity: UserIdentity) {
        self.init(
            participantID: "", userIdentity: identity, role: .privateUser, permission: .readOnly, acceptanceStatus: .unknown,
            dateAddedToShare: nil)
    }
}

extension RecordZone {
    /// The zone of a zone row, as CloudKit shows it (named `id`).
    package init(_ state: ZoneState, id: RecordZoneID) {
        self.init(zoneID: id, capabilities: RecordZone.Capabilities(rawValue: state.capabilities))
        if !state.zoneShareToken.isEmpty {
            share = RecordID(recordName: Share.zoneWideShareRecordName, zoneID: id)
        }
    }
}
