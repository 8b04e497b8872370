//go:build unix

package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runDelay is the time this process's threads have spent ready to run but
// waiting for a CPU, summed over its threads (Linux /proc/self/task/*/
// schedstat, second field); 0 where that is not available.
func runDelay() time.Duration {
	dir, err := os.Open("/proc/self/task")
	if err != nil {
		return 0
	}
	defer dir.Close()
	tasks, err := dir.Readdirnames(-1)
	if err != nil {
		return 0
	}
	var total int64
	var buf [128]byte
	for _, t := range tasks {
		f, err := os.Open("/proc/self/task/" + t + "/schedstat")
		if err != nil {
			continue
		}
		n, _ := f.Read(buf[:])
		f.Close()
		fields := strings.Fields(string(buf[:n]))
		if len(fields) < 2 {
			continue
		}
		if v, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
			total += v
		}
	}
	return time.Duration(total)
}

// machineCPU is the machine's CPU time so far, summed over its CPUs (Linux
// /proc/stat); ok is false where that is not available.
func machineCPU() (c statCPU, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return statCPU{}, false
	}
	return parseStat(string(b))
}
