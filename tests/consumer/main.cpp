#include <iostream>

#include <kiln/kiln.hpp>

int main() {
  kiln::Var x = kiln::vector("x");
  kiln::Function f = kiln::function({x}, {2.0 * x + 1.0});
  kiln::Tensor y = f(kiln::Tensor::from({1.f, 2.f, 3.f}, {3}))[0];
  std::cout << "y =";
  for (float v : y.to_vector<float>()) std::cout << ' ' << v;
  std::cout << '\n';
}
