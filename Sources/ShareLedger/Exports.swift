// `import ShareLedger` brings the event log's public API (EventLog, LogPosition, LedgerError, ...) too.
@_exported import EventLog
