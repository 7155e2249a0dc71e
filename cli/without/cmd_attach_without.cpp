// `kvscope attach` and `kvscope lookup` in a build configured with -DKVSCOPE_ATTACH=OFF (no ZeroMQ
// or msgpack-cxx: the GPU check's build on a bare device machine): the commands exist and say why
// they cannot run.
#include "cli/commands.h"
#include "engine/common/error.h"

namespace kvscope::cli {

int cmd_attach(const Argv&) {
  throw Error("",
              "this kvscope was built without attach (-DKVSCOPE_ATTACH=OFF: ZeroMQ and "
              "msgpack-cxx left out); rebuild with -DKVSCOPE_ATTACH=ON");
}

int cmd_lookup(const Argv&) {
  throw Error("",
              "this kvscope was built without attach (-DKVSCOPE_ATTACH=OFF: msgpack-cxx left out, "
              "so stream.kvj cannot be read); rebuild with -DKVSCOPE_ATTACH=ON");
}

}  // namespace kvscope::cli
