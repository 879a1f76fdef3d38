#include <vector>
#include <string>
namespace dflash::cli {
int bench_attention_main(const std::vector<std::string>& args) { return 0; }
}
