"""What the device backends (SYCL, CUDA) share: their device handle made
once per process, and the part of a plan replay that is not about the
device's API (which NumPy arguments to stage, when to copy back)."""
import threading


def once(make):
    """A function that returns make()'s result, made on its first call (one
    thread makes it; a make that raises is tried again on the next call)."""
    made, lock = [], threading.Lock()

    def get():
        if not made:
            with lock:
                if not made:
                    made.append(make())
        return made[0]
    return get


class DeviceReplay:
    """A plan on a device: tensors given as the backend's device_array are
    used in place; NumPy arguments are copied into device buffers kept per
    tensor (grown when a larger one comes) before the phases, and the written
    ones copied back after. Runs are one at a time (they share those buffers).
    A backend fills in: device_array, allocate(nbytes) -> buffer with
    .address and .nbytes, begin() -> a context for one run (a stream, say),
    copy_in(buffer, x, ctx), launch(addresses, ctx), copy_out(x, buffer, ctx)
    and finish(ctx, staged): staged says whether any NumPy argument was copied."""

    takes_threads = False  # the device schedules its own work

    def __init__(self, plan):
        self.names = list(plan.tensors)
        self.written = plan.written
        self._staging = {}  # tensor name -> device copy of a NumPy argument, reused across runs
        self._lock = threading.Lock()

    def run(self, arrays, threads=None):
        """arrays: name -> NumPy array or device_array, checked by Plan.check."""
        with self._lock:
            ctx = self.begin()
            addresses, back = [], []
            for name in self.names:
                x = arrays[name]
                if isinstance(x, self.device_array):
                    addresses.append(x.address)
                    continue
                buf = self._staging.get(name)
                if buf is None or buf.nbytes < x.nbytes:
                    buf = self._staging[name] = self.allocate(x.nbytes)
                self.copy_in(buf, x, ctx)
                addresses.append(buf.address)
                if name in self.written:
                    back.append((buf, x))
            self.launch(addresses, ctx)
            for buf, x in back:
                self.copy_out(x, buf, ctx)
            self.finish(ctx, staged=len(addresses) != sum(
                isinstance(arrays[n], self.device_array) for n in self.names))
