// make_emulated_device_ops() in the browser build (scripts/web.sh): the SIMT emulator switches
// between its threads with ucontext fibers, which WebAssembly does not have, so --backend cuda-sim
// (and the Controls panel's choice of it) is refused with the reason. The desktop build runs it.
#include "engine/common/error.h"
#include "kernels/backend/device_ops.h"

namespace kvscope::device {

std::unique_ptr<DeviceOps> make_emulated_device_ops() {
  throw Error("--backend",
              "cuda-sim: the SIMT emulator needs ucontext fibers, which a browser's WebAssembly "
              "does not have; the desktop kvscope-ui runs it (docs/web.md)");
}

}  // namespace kvscope::device
