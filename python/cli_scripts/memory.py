"""Peak extra memory of a piece of work: RSS high-water mark on the CPU (Linux), the caching
allocator's peak on CUDA. Same method as the C++ side (src/util/memory_probe.cpp)."""
import ctypes
import torch


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


class PeakMemory:
    def __init__(self, device):
        self.device = torch.device(device)
        self.base = 0
        if self.device.type == "cpu":
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: big blocks come from mmap and go back to the OS
            self._libc = libc

    def reset(self):
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            return
        self._libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.base = _status_kb("VmRSS")

    def peak_extra_mb(self):
        if self.device.type == "cuda":
            return (torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20
        return max(0, _status_kb("VmHWM") - self.base) / 2**20
