import Foundation
import ShareLedger
import ShareLedgerAudit
import ShareLedgerReports
import Testing
import TestSupport

/// Headless Chromium (Debian's `chromium`, which scripts/setup installs).
enum Chromium {
    static let path: String? = {
        for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        return nil
    }()

    /// CI must have it: there a missing browser fails the test instead of skipping it.
    static let inCI = ProcessInfo.processInfo.environment["CI"].map { !$0.isEmpty && $0 != "false" } ?? false

    static let skipMessage =
        "headless Chromium is not installed (scripts/setup installs Debian's chromium); the browser test is skipped"

    static func arguments(_ directory: TemporaryDirectory) -> [String] {
        // --no-sandbox: tests may run as root, where Chromium's sandbox refuses to start.
        [
            "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-extensions",
            "--user-data-dir=\(directory.child("chromium-profile"))", "--window-size=1280,1400",
        ]
    }

    /// A screenshot of `file`, as PNG.
    static func screenshot(_ file: String, to png: String, in directory: TemporaryDirectory) async throws -> ProcessOutcome {
        try await runProcess(
            URL(fileURLWithPath: path!), arguments(directory) + ["--screenshot=\(png)", URL(fileURLWithPath: file).absoluteString],
            timeLimit: .seconds(180))
    }

    /// The layout boxes of the page's SVG parts, measured by a test-only copy of the page with a
    /// script that writes them into the DOM, which `--dump-dom` prints. The report itself has no script.
    static func boxes(_ html: String, in directory: TemporaryDirectory, name: String) async throws -> Boxes {
        let wrapper = directory.child("\(name)-boxes.html")
        let script = """
            <script>
            (() => {
              const box = e => { const b = e.getBoundingClientRect(); return {x: b.left, y: b.top, w: b.width, h: b.height}; };
              const out = {svgs: [], labels: [], marks: [], markLabels: [], bars: []};
              document.querySelectorAll('svg').forEach(s => out.svgs.push(box(s)));
              document.querySelectorAll('svg .lane-label, svg .series').forEach(e => out.labels.push(box(e)));
              document.querySelectorAll('svg .mark').forEach(e => out.marks.push(box(e)));
              document.querySelectorAll('svg .mark-label').forEach(e => {
                const b = box(e); b.lane = e.closest('g').id; out.markLabels.push(b);
              });
              document.querySelectorAll('svg rect.bar').forEach(e => out.bars.push(box(e)));
              const pre = document.createElement('pre');
              pre.id = 'boxes';
              pre.textContent = JSON.stringify(out);
              document.body.appendChild(pre);
            })();
            </script>
            """
        try Data(html.replacingOccurrences(of: "</body>", with: script + "</body>").utf8).write(to: URL(fileURLWithPath: wrapper))
        let outcome = try await runProcess(
            URL(fileURLWithPath: path!),
            arguments(directory) + ["--dump-dom", "--virtual-time-budget=5000", URL(fileURLWithPath: wrapper).absoluteString],
            timeLimit: .seconds(180))
        guard let start = outcome.stdout.range(of: "<pre id=\"boxes\">"),
            let end = outcome.stdout.range(of: "</pre>", range: start.upperBound..<outcome.stdout.endIndex)
        else {
            throw BrowserFailure(description: "chromium printed no boxes: \(outcome.summary.prefix(2_000))")
        }
        let json = String(outcome.stdout[start.upperBound..<end.lowerBound]).replacingOccurrences(of: "&quot;", with: "\"")
        return try JSONDecoder().decode(Boxes.self, from: Data(json.utf8))
    }

    struct Boxes: Decodable {
        struct Box: Decodable {
            var x: Double
            var y: Double
            var w: Double
            var h: Double
            var lane: String?
            var right: Double { x + w }
            var bottom: Double { y + h }
            func overlaps(_ other: Box) -> Bool {
                x < other.right - 0.5 && other.x < right - 0.5 && y < other.bottom - 0.5 && other.y < bottom - 0.5
            }
        }
        var svgs: [Box]
        var labels: [Box]
        var marks: [Box]
        var markLabels: [Box]
        var bars: [Box]
    }

    struct BrowserFailure: Error, CustomStringConvertible { var description: String }

    /// Whether the PNG has a real picture: decoded by python3 (zlib, PNG filters), the share of
    /// pixels that are not white and the number of distinct colours.
    static func pngInk(_ png: String) async throws -> (width: Int, height: Int, inked: Double, colours: Int) {
        let script = """
            import struct, sys, zlib
            data = open(sys.argv[1], 'rb').read()
            assert data[:8] == b'\\x89PNG\\r\\n\\x1a\\n', 'not a PNG'
            i, idat = 8, b''
            while i < len(data):
                n, = struct.unpack('>I', data[i:i+4]); kind = data[i+4:i+8]; body = data[i+8:i+8+n]; i += 12 + n
                if kind == b'IHDR': w, h, depth, ctype = struct.unpack('>IIBB', body[:10])
                if kind == b'IDAT': idat += body
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
            raw = zlib.decompress(idat); stride = w * bpp
            prev = bytearray(stride); inked = 0; colours = set()
            for y in range(h):
                f = raw[y * (stride + 1)]; line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
                for x in range(stride):
                    a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
                    if f == 1: line[x] = (line[x] + a) & 255
                    elif f == 2: line[x] = (line[x] + b) & 255
                    elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
                    elif f == 4:
                        p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                        line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
                for x in range(0, stride, bpp):
                    px = bytes(line[x:x+3])
                    if px != b'\\xff\\xff\\xff': inked += 1
                    if len(colours) < 4096: colours.add(px)
                prev = line
            print(w, h, inked / (w * h), len(colours))
            """
        let directory = TemporaryDirectory("png")
        let file = directory.child("ink.py")
        try Data(script.utf8).write(to: URL(fileURLWithPath: file))
        let outcome = try await runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["python3", file, png])
        let parts = outcome.stdout.split(separator: " ").map { String($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard outcome.exited(0), parts.count == 4, let w = Int(parts[0]), let h = Int(parts[1]), let inked = Double(parts[2]),
            let colours = Int(parts[3])
        else { throw BrowserFailure(description: "cannot read the screenshot: \(outcome.summary)") }
        return (w, h, inked, colours)
    }
}

@Suite("Report pages in headless Chromium")
struct BrowserTests {
    /// Each page, opened in headless Chromium: the screenshot is a picture (not blank), every SVG
    /// and lane label has a box, no lane label overlaps another, and no mark, bar or mark label
    /// reaches into the label column or (mark labels) overlaps another in its lane.
    @Test(.enabled(if: Chromium.path != nil || Chromium.inCI, Comment(rawValue: Chromium.skipMessage)))
    func pagesLayOut() async throws {
        guard Chromium.path != nil else {
            Issue.record("CI must run the browser test, but chromium is not installed: run scripts/setup")
            return
        }
        let fixture = try await SimulatedLedger.make()
        let share = try #require(fixture.shares.first)
        let container = share.container
        let head = try fixture.ledger.log.head().position.rawValue
        let shareReport = try ShareReport.make(ledger: fixture.ledger, url: share.url)
        let user = try #require(shareReport.timeline.lanes.first(where: { $0.kind == .participant && $0.userRecordName != nil })?.userRecordName)
        let pages: [(name: String, html: String, lanes: Bool)] = [
            ("share", shareReport.html(), true),
            ("share-collapsed", shareReport.html(maxLanes: 3), true),
            ("user", try UserReport.make(ledger: fixture.ledger, user: user, container: container).html(), true),
            ("review", try AccessReview.make(ledger: fixture.ledger, container: container, from: .position(LogPosition(1)), to: .position(LogPosition(head))).html(), false),
            ("bench", BenchReport(runs: [try BenchReportTests.run("bench-events-quick.json"), try BenchReportTests.run("peer-comparison.json")]).html(), true),
        ]
        await fixture.close()
        for page in pages {
            let file = fixture.directory.child("\(page.name).html")
            try Data(page.html.utf8).write(to: URL(fileURLWithPath: file))
            let png = fixture.directory.child("\(page.name).png")
            let shot = try await Chromium.screenshot(file, to: png, in: fixture.directory)
            #expect(FileManager.default.fileExists(atPath: png), "\(page.name): no screenshot: \(shot.summary.prefix(1_000))")
            let ink = try await Chromium.pngInk(png)
            #expect(ink.width == 1280 && ink.height == 1400, "\(page.name): \(ink)")
            #expect(ink.inked > 0.02 && ink.colours >= 8, "\(page.name): the screenshot is (nearly) blank: \(ink)")
            guard page.lanes else { continue }
            let boxes = try await Chromium.boxes(page.html, in: fixture.directory, name: page.name)
            #expect(!boxes.svgs.isEmpty && boxes.svgs.allSatisfy { $0.w > 100 && $0.h > 20 }, "\(page.name): svg boxes \(boxes.svgs)")
            #expect(!boxes.labels.isEmpty && boxes.labels.allSatisfy { $0.w > 0 && $0.h > 0 }, "\(page.name): empty label boxes")
            for (i, a) in boxes.labels.enumerated() {
                for b in boxes.labels[(i + 1)...] where a.overlaps(b) {
                    Issue.record("\(page.name): lane labels overlap: \(a) and \(b)")
                }
            }
            // The label column ends where the widest label ends (within each SVG).
            for svg in boxes.svgs {
                let inside = { (box: Chromium.Boxes.Box) in box.y >= svg.y - 1 && box.bottom <= svg.bottom + 1 }
                let column = boxes.labels.filter(inside).map(\.right).max() ?? svg.x
                #expect(boxes.marks.filter(inside).allSatisfy { $0.w > 0 && $0.h > 0 && $0.x >= column }, "\(page.name): a mark in the label column")
                #expect(boxes.bars.filter(inside).allSatisfy { $0.h > 0 && $0.x >= column - 0.5 }, "\(page.name): a bar in the label column")
                #expect(boxes.markLabels.filter(inside).allSatisfy { $0.x >= column }, "\(page.name): a mark label in the label column")
            }
            let byLane = Dictionary(grouping: boxes.markLabels, by: { $0.lane ?? "" })
            for (lane, labels) in byLane {
                let sorted = labels.sorted { $0.x < $1.x }
                for (a, b) in zip(sorted, sorted.dropFirst()) where a.overlaps(b) {
                    Issue.record("\(page.name): mark labels overlap in \(lane): \(a) and \(b)")
                }
            }
            if page.name.hasPrefix("share") { #expect(!boxes.marks.isEmpty && !boxes.markLabels.isEmpty, "\(page.name): marks drawn") }
        }
    }
}
