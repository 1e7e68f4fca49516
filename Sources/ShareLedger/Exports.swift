// `import ShareLedger` brings the event log's public API (EventLog, LogPosition, LedgerError, ...) and the
// sharing domain's public values (Record, Share, RecordID, ...) too.
@_exported import EventLog
@_exported import SharingDomain
