// io's name for the output-path checks and the atomic / stream writer, which live on the ground floor
// (src/util/output_file.h) so that every layer, src/ops included, writes its outputs through the same code.
#pragma once
#include "output_file.h"

namespace dflash::io {

using util::AtomicOutputFile;
using util::check_output_folder;
using util::check_output_path;
using util::check_resumable_output_path;
using util::remove_stale_temporaries;
using util::temp_path_for;
using util::write_file_atomically;

}  // namespace dflash::io
