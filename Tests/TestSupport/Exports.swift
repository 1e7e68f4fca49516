// The support every test target shares with the crash harness (children, the writer gate, clocks).
@_exported import ShareLedgerTestSupport
