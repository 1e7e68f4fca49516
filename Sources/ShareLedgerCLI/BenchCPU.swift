import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The CPU time this whole process has used so far, every thread counted (writer, callers, worker,
/// readers): `getrusage(RUSAGE_SELF)`, in nanoseconds, in user space and in the kernel.
struct ProcessCPUTime: Sendable {
    var userNanoseconds: UInt64
    var systemNanoseconds: UInt64

    static func now() -> ProcessCPUTime {
        var usage = rusage()
        #if os(Linux)
        // RUSAGE_SELF is 0; the Glibc module imports the parameter's type, not the constant's.
        guard getrusage(__rusage_who_t(0), &usage) == 0 else { return ProcessCPUTime(userNanoseconds: 0, systemNanoseconds: 0) }
        #else
        guard getrusage(RUSAGE_SELF, &usage) == 0 else { return ProcessCPUTime(userNanoseconds: 0, systemNanoseconds: 0) }
        #endif
        func nanoseconds(_ time: timeval) -> UInt64 { UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_usec) &* 1_000 }
        return ProcessCPUTime(userNanoseconds: nanoseconds(usage.ru_utime), systemNanoseconds: nanoseconds(usage.ru_stime))
    }

    /// The CPU time used between `earlier` and this one.
    static func - (later: ProcessCPUTime, earlier: ProcessCPUTime) -> ProcessCPUTime {
        ProcessCPUTime(
            userNanoseconds: later.userNanoseconds &- earlier.userNanoseconds,
            systemNanoseconds: later.systemNanoseconds &- earlier.systemNanoseconds)
    }

    static func + (left: ProcessCPUTime, right: ProcessCPUTime) -> ProcessCPUTime {
        ProcessCPUTime(
            userNanoseconds: left.userNanoseconds &+ right.userNanoseconds,
            systemNanoseconds: left.systemNanoseconds &+ right.systemNanoseconds)
    }

    static let zero = ProcessCPUTime(userNanoseconds: 0, systemNanoseconds: 0)
}

/// The process's CPU time over a measured section and the work done in it (actions or events): the
/// figures that compare across machines better than rates do, since they leave out waiting (flushes,
/// other processes) and depend on the CPU's speed alone.
struct CPUCost: Sendable {
    var time = ProcessCPUTime.zero
    /// Actions (or events) done while `time` was spent.
    var units = 0

    init(time: ProcessCPUTime = .zero, units: Int = 0) {
        self.time = time
        self.units = units
    }

    /// All threads' CPU microseconds per unit, user space and kernel.
    var microsPerUnit: Double { Double(time.userNanoseconds &+ time.systemNanoseconds) / 1_000 / Double(max(1, units)) }
    var userMicrosPerUnit: Double { Double(time.userNanoseconds) / 1_000 / Double(max(1, units)) }
    var systemMicrosPerUnit: Double { Double(time.systemNanoseconds) / 1_000 / Double(max(1, units)) }

    /// `PREFIX.cpuMicrosPerUNIT`, `PREFIX.userCpuMicrosPerUNIT` and `PREFIX.systemCpuMicrosPerUNIT`
    /// (`unit`: `Action` or `Event`).
    func figures(_ prefix: String, per unit: String) -> [String: Double] {
        [
            "\(prefix).cpuMicrosPer\(unit)": microsPerUnit,
            "\(prefix).userCpuMicrosPer\(unit)": userMicrosPerUnit,
            "\(prefix).systemCpuMicrosPer\(unit)": systemMicrosPerUnit,
        ]
    }
}
