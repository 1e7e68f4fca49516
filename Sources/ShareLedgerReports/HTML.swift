import Foundation

/// The bits every report page shares: escaping, the page around the content, the style sheet.
/// Pages are one self-contained file: no script, no external resource, readable offline and on paper.
public enum HTML {
    /// `text` with `&`, `<`, `>`, `"` and `'` escaped, for element content and attribute values alike.
    public static func escape(_ text: some StringProtocol) -> String {
        // Most text (names, positions, event types) has nothing to escape: one pass over the bytes.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x26 || $0 == 0x3C || $0 == 0x3E || $0 == 0x22 || $0 == 0x27 }) {
            return String(text)
        }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default:
                // Control characters other than tab and newline have no business in a report.
                if character.value < 0x20 && character != "\t" && character != "\n" { out += "\u{FFFD}" } else {
                    out.unicodeScalars.append(character)
                }
            }
        }
        return out
    }

    /// A number for SVG coordinates: one decimal.
    static func n(_ value: Double) -> String {
        let scaled = (value * 10).rounded() / 10
        return scaled == scaled.rounded() ? String(Int(scaled)) : String(scaled)
    }

    /// A whole page around `body` (already HTML), with the reports' style sheet and no script.
    public static func page(title: String, body: String) -> String {
        """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <meta name="generator" content="share-ledger report">
        <title>\(escape(title))</title>
        <style>
        \(style)
        </style>
        </head>
        <body>
        \(body)
        </body>
        </html>

        """
    }

    static let style = """
        :root { color-scheme: light; }
        body { font: 13px/1.4 system-ui, "DejaVu Sans", Helvetica, Arial, sans-serif; color: #1b1b1b; margin: 24px; background: #fff; }
        h1 { font-size: 20px; margin: 0 0 6px; }
        h2 { font-size: 16px; margin: 22px 0 6px; }
        .meta { color: #444; margin: 0 0 10px; }
        .meta dt { float: left; clear: left; width: 9em; color: #666; }
        .meta dd { margin: 0 0 2px 9.5em; word-break: break-all; }
        .chain { padding: 6px 10px; border-radius: 4px; margin: 8px 0 12px; }
        .chain.ok { background: #e8f5e9; border: 1px solid #a5d6a7; }
        .chain.bad { background: #ffebee; border: 1px solid #ef9a9a; font-weight: bold; }
        svg { display: block; max-width: 100%; height: auto; }
        svg text { font-family: system-ui, "DejaVu Sans", Helvetica, Arial, sans-serif; }
        table { border-collapse: collapse; margin: 6px 0 16px; }
        th, td { border-bottom: 1px solid #e0e0e0; padding: 2px 8px; text-align: left; vertical-align: top; }
        th { background: #f5f5f5; position: sticky; top: 0; }
        td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
        td.hash { font-family: "DejaVu Sans Mono", monospace; font-size: 11px; color: #555; }
        tr:target { background: #fff59d; }
        .note { color: #555; font-size: 12px; }
        .legend span { display: inline-block; margin-right: 14px; white-space: nowrap; }
        .swatch { display: inline-block; width: 14px; height: 10px; vertical-align: -1px; margin-right: 4px; border: 1px solid #0003; }
        @media print {
          body { margin: 8mm; font-size: 10px; }
          th { position: static; }
          a { color: inherit; text-decoration: none; }
          tr { break-inside: avoid; }
        }
        @page { size: A4 landscape; margin: 10mm; }
        """
}
