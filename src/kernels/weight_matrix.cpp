#include "kernels/weight_matrix.h"

#include "core/error.h"

namespace fathom::kernels {

NumericMode parse_numeric_mode(const std::string& name) {
  if (name == "exact") return NumericMode::kExact;
  if (name == "w8a8") return NumericMode::kW8A8;
  FATHOM_FAIL("unknown numeric mode '" << name << "' (expected exact or w8a8)");
}

}  // namespace fathom::kernels
