#include "analyze/regression.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include <fmt/format.h>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>

#include "core/error.h"
#include "core/random.h"
#include "core/stats.h"

namespace tokenscope::analyze {
namespace {

using Eigen::Index;
using Eigen::MatrixXd;
using Eigen::VectorXd;

void check_confidence(const char* what, double confidence) {
  if (!(confidence > 0.0 && confidence < 1.0))
    throw UsageError(fmt::format("{}: confidence must be in (0, 1), got {}", what, confidence));
}

void check_finite(const char* what, const char* name, const MatrixXd& m) {
  for (Index j = 0; j < m.cols(); ++j) {
    for (Index i = 0; i < m.rows(); ++i) {
      if (!std::isfinite(m(i, j)))
        throw InputError(what, 0, fmt::format("{}[{}, {}]", name, i, j),
                         fmt::format("a finite number, got {}", m(i, j)));
    }
  }
}

void check_finite(const char* what, const char* name, const VectorXd& v) {
  for (Index i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v(i)))
      throw InputError(what, 0, fmt::format("{}[{}]", name, i), fmt::format("a finite number, got {}", v(i)));
  }
}

void check_rows(const char* what, const char* name, Index got, Index rows) {
  if (got != rows)
    throw InputError(what, 0, name, fmt::format("{} values, one per observation, got {}", rows, got));
}

// The two-sided quantile of Student's t (df > 0) or the normal distribution.
double t_quantile(double df, double confidence) {
  return boost::math::quantile(boost::math::students_t(df), 0.5 + confidence / 2.0);
}
double z_quantile(double confidence) {
  return boost::math::quantile(boost::math::normal(), 0.5 + confidence / 2.0);
}

Estimate interval(double estimate, double se, double quantile) {
  return {estimate, se, estimate - quantile * se, estimate + quantile * se};
}

VectorXd to_vector(std::span<const double> s) {
  return Eigen::Map<const VectorXd>(s.data(), static_cast<Index>(s.size()));
}

// The observations whose fold is (in_fold) or is not (!in_fold) `fold`.
std::vector<Index> rows_where(std::span<const std::size_t> fold_of, std::size_t fold, bool in_fold) {
  std::vector<Index> rows;
  for (std::size_t i = 0; i < fold_of.size(); ++i) {
    if ((fold_of[i] == fold) == in_fold) rows.push_back(static_cast<Index>(i));
  }
  return rows;
}

}  // namespace

Estimate OlsFit::robust(std::size_t j) const {
  const auto k = static_cast<Index>(j);
  return {coefficients(k), robust_std_errors(k), robust_ci_low(k), robust_ci_high(k)};
}

OlsFit ols(const MatrixXd& x, const VectorXd& y, const OlsOptions& options) {
  constexpr const char* kWhat = "least squares";
  check_confidence(kWhat, options.confidence);
  const Index n = x.rows();
  check_rows(kWhat, "y", y.size(), n);
  check_finite(kWhat, "x", x);
  check_finite(kWhat, "y", y);
  const Index offset = options.intercept ? 1 : 0;
  const Index p = x.cols() + offset;
  if (p == 0) throw InputError(kWhat, 0, "x", "at least one column, or an intercept");
  if (n <= p)
    throw InputError(kWhat, 0, "rows",
                     fmt::format("more observations than coefficients ({}), got {} observations", p, n));
  MatrixXd design(n, p);
  if (options.intercept) design.col(0).setOnes();
  design.rightCols(x.cols()) = x;
  // Columns scaled to unit length, so that the rank test does not depend on
  // their units: X = X_s D, beta = D^-1 beta_s, (X'X)^-1 = D^-1 (X_s'X_s)^-1 D^-1.
  VectorXd norms = design.colwise().norm().transpose();
  for (Index j = 0; j < p; ++j) {
    if (norms(j) == 0.0) norms(j) = 1.0;
  }
  const MatrixXd scaled = design * norms.cwiseInverse().asDiagonal();
  Eigen::ColPivHouseholderQR<MatrixXd> qr(scaled);
  qr.setThreshold(1e-10);
  if (qr.rank() < p) {
    const Index col = qr.colsPermutation().indices()(qr.rank());
    const std::string name = options.intercept && col == 0 ? std::string("the intercept")
                                                           : fmt::format("x column {}", col - offset);
    throw InputError(kWhat, 0, "x",
                     fmt::format("linearly independent columns; {} is a linear combination of the others "
                                 "(rank {} of {})",
                                 name, qr.rank(), p));
  }
  OlsFit fit;
  fit.observations = static_cast<std::size_t>(n);
  fit.df_residual = static_cast<std::size_t>(n - p);
  const double df = static_cast<double>(n - p);
  fit.coefficients = qr.solve(y).cwiseQuotient(norms);
  fit.residuals = y - design * fit.coefficients;
  const double rss = fit.residuals.squaredNorm();
  fit.residual_variance = rss / df;
  // (X_s'X_s)^-1 = P R^-1 R^-T P' from X_s P = Q R.
  const MatrixXd r = qr.matrixR().topLeftCorner(p, p).triangularView<Eigen::Upper>();
  const MatrixXd r_inv = r.triangularView<Eigen::Upper>().solve(MatrixXd::Identity(p, p));
  const MatrixXd inner =
      qr.colsPermutation() * (r_inv * r_inv.transpose()) * qr.colsPermutation().transpose();
  const MatrixXd xtx_inv = norms.cwiseInverse().asDiagonal() * inner * norms.cwiseInverse().asDiagonal();
  // HC1: n/df (X'X)^-1 X' diag(e^2) X (X'X)^-1.
  const MatrixXd weighted = design.array().colwise() * fit.residuals.array();
  const MatrixXd hc1 = (static_cast<double>(n) / df) * xtx_inv * (weighted.transpose() * weighted) * xtx_inv;
  fit.std_errors = (fit.residual_variance * xtx_inv.diagonal()).cwiseSqrt();
  fit.robust_std_errors = hc1.diagonal().cwiseMax(0.0).cwiseSqrt();
  const double q = t_quantile(df, options.confidence);
  fit.ci_low = fit.coefficients - q * fit.std_errors;
  fit.ci_high = fit.coefficients + q * fit.std_errors;
  fit.robust_ci_low = fit.coefficients - q * fit.robust_std_errors;
  fit.robust_ci_high = fit.coefficients + q * fit.robust_std_errors;
  const double tss = options.intercept ? (y.array() - y.mean()).matrix().squaredNorm() : y.squaredNorm();
  fit.r_squared = tss > 0.0 ? 1.0 - rss / tss : std::numeric_limits<double>::quiet_NaN();
  return fit;
}

RidgeFit ridge(const MatrixXd& x, const VectorXd& y, double lambda) {
  constexpr const char* kWhat = "ridge regression";
  if (!(lambda > 0.0) || !std::isfinite(lambda))
    throw UsageError(fmt::format("{}: lambda must be finite and > 0, got {}", kWhat, lambda));
  const Index n = x.rows(), k = x.cols();
  check_rows(kWhat, "y", y.size(), n);
  if (n == 0) throw InputError(kWhat, 0, "rows", "at least one observation");
  check_finite(kWhat, "x", x);
  check_finite(kWhat, "y", y);
  RidgeFit fit;
  fit.lambda = lambda;
  const double y_mean = y.mean();
  fit.intercept = y_mean;
  fit.coefficients = VectorXd::Zero(k);
  if (k == 0) return fit;
  const Eigen::RowVectorXd means = x.colwise().mean();
  MatrixXd z = x.rowwise() - means;
  VectorXd scale(k);
  for (Index j = 0; j < k; ++j) {
    const double sd = std::sqrt(z.col(j).squaredNorm() / static_cast<double>(n));
    // A constant column (its spread no more than rounding) contributes nothing.
    if (!(sd > 1e-12 * x.col(j).cwiseAbs().maxCoeff())) {
      z.col(j).setZero();
      scale(j) = 1.0;
    } else {
      scale(j) = sd;
      z.col(j) /= sd;
    }
  }
  MatrixXd gram = z.transpose() * z;
  gram.diagonal().array() += lambda;
  const VectorXd beta = gram.llt().solve(z.transpose() * (y.array() - y_mean).matrix());
  fit.coefficients = beta.cwiseQuotient(scale);
  fit.intercept = y_mean - means.dot(fit.coefficients);
  return fit;
}

VectorXd predict(const RidgeFit& fit, const MatrixXd& x) {
  if (x.cols() != fit.coefficients.size())
    throw InputError("ridge prediction", 0, "x",
                     fmt::format("{} columns, as in the fit, got {}", fit.coefficients.size(), x.cols()));
  return (x * fit.coefficients).array() + fit.intercept;
}

LinearTrend linear_trend(std::span<const double> t, std::span<const double> y, double confidence) {
  constexpr const char* kWhat = "linear trend";
  check_confidence(kWhat, confidence);
  const VectorXd tv = to_vector(t), yv = to_vector(y);
  check_rows(kWhat, "y", yv.size(), tv.size());
  check_finite(kWhat, "t", tv);
  check_finite(kWhat, "y", yv);
  const Index n = tv.size();
  if (n < 3) throw InputError(kWhat, 0, "series", fmt::format("at least 3 points, got {}", n));
  const VectorXd tc = tv.array() - tv.mean(), yc = yv.array() - yv.mean();
  const double stt = tc.squaredNorm(), sty = tc.dot(yc), syy = yc.squaredNorm();
  if (!(stt > 0.0)) throw InputError(kWhat, 0, "t", "at least two distinct values");
  LinearTrend out;
  out.observations = static_cast<std::size_t>(n);
  const double slope = sty / stt;
  out.intercept = yv.mean() - slope * tv.mean();
  const double rss = (yc - slope * tc).squaredNorm();
  const double df = static_cast<double>(n - 2);
  const double se = std::sqrt(rss / df / stt);
  out.slope = interval(slope, se, t_quantile(df, confidence));
  if (se > 0.0) {
    const boost::math::students_t dist(df);
    out.slope_p_value =
        std::min(1.0, 2.0 * boost::math::cdf(boost::math::complement(dist, std::abs(slope / se))));
  } else {
    out.slope_p_value = slope == 0.0 ? 1.0 : 0.0;
  }
  out.r_squared =
      syy > 0.0 ? std::min(1.0, sty * sty / (stt * syy)) : std::numeric_limits<double>::quiet_NaN();
  return out;
}

LinearTrend linear_trend(std::span<const double> y, double confidence) {
  std::vector<double> t(y.size());
  std::iota(t.begin(), t.end(), 0.0);
  return linear_trend(t, y, confidence);
}

ExponentialDecayFit fit_exponential_decay(std::span<const double> x, std::span<const double> y,
                                          const DecayFitOptions& options) {
  constexpr const char* kWhat = "exponential decay fit";
  check_confidence(kWhat, options.confidence);
  if (!(options.tolerance > 0.0) || options.max_iterations == 0)
    throw UsageError(fmt::format("{}: tolerance must be > 0 and max_iterations >= 1", kWhat));
  const VectorXd xv = to_vector(x), yv = to_vector(y);
  check_rows(kWhat, "y", yv.size(), xv.size());
  check_finite(kWhat, "x", xv);
  check_finite(kWhat, "y", yv);
  const Index n = xv.size();
  if (n < 3) throw InputError(kWhat, 0, "points", fmt::format("at least 3 points, got {}", n));
  if (xv.minCoeff() == xv.maxCoeff()) throw InputError(kWhat, 0, "x", "at least two distinct values");

  // Start: ln y = ln a - b x over the points with y > 0.
  std::vector<double> start_x, start_ln_y;
  for (Index i = 0; i < n; ++i) {
    if (yv(i) > 0.0) {
      start_x.push_back(xv(i));
      start_ln_y.push_back(std::log(yv(i)));
    }
  }
  if (start_x.size() < 2 ||
      *std::min_element(start_x.begin(), start_x.end()) == *std::max_element(start_x.begin(), start_x.end()))
    throw InputError(kWhat, 0, "y", "values > 0 at two distinct x at least, for the log-linear start");
  double slope = 0.0, ln_a = 0.0;
  {
    const VectorXd sx = to_vector(start_x), sy = to_vector(start_ln_y);
    const VectorXd cx = sx.array() - sx.mean();
    slope = cx.dot((sy.array() - sy.mean()).matrix()) / cx.squaredNorm();
    ln_a = sy.mean() - slope * sx.mean();
  }
  ExponentialDecayFit fit;
  fit.start_a = std::exp(ln_a);
  fit.start_b = -slope;

  const auto rss_at = [&](double a, double b) {
    return (yv.array() - a * (-b * xv.array()).exp()).matrix().squaredNorm();
  };
  double a = fit.start_a, b = fit.start_b;
  double rss = rss_at(a, b);
  double mu = 1e-3;
  const double exact = 1e-24 * yv.squaredNorm();  // a fit exact to rounding
  bool stuck = false;
  MatrixXd jac(n, 2);
  VectorXd resid(n);
  const auto linearise = [&] {
    const VectorXd e = (-b * xv.array()).exp();
    jac.col(0) = e;
    jac.col(1) = -a * (xv.array() * e.array());
    resid = yv - a * e;
  };
  while (fit.iterations < options.max_iterations && !fit.converged && !stuck) {
    ++fit.iterations;
    if (rss <= exact) {
      fit.converged = true;
      break;
    }
    linearise();
    const Eigen::Matrix2d jtj = jac.transpose() * jac;
    const Eigen::Vector2d g = jac.transpose() * resid;
    for (;;) {
      Eigen::Matrix2d damped = jtj;
      damped.diagonal() += mu * jtj.diagonal();
      const Eigen::Vector2d step = damped.ldlt().solve(g);
      const double a_new = a + step(0), b_new = b + step(1);
      const double rss_new = rss_at(a_new, b_new);
      if (step.allFinite() && std::isfinite(rss_new) && rss_new < rss) {
        a = a_new;
        b = b_new;
        rss = rss_new;
        mu = std::max(mu / 10.0, 1e-12);
        fit.converged = std::abs(step(0)) <= options.tolerance * (std::abs(a) + options.tolerance) &&
                        std::abs(step(1)) <= options.tolerance * (std::abs(b) + options.tolerance);
        break;
      }
      mu *= 10.0;
      if (mu > 1e16) {
        stuck = true;
        break;
      }
    }
  }
  linearise();
  if (stuck) {
    // No step lowers the RSS any more: a minimum to rounding when the
    // Gauss-Newton step from here is within sqrt(tolerance) of the parameters.
    const Eigen::Vector2d step = (jac.transpose() * jac).ldlt().solve(jac.transpose() * resid);
    const double loose = std::sqrt(options.tolerance);
    fit.converged = rss <= exact || (std::abs(step(0)) <= loose * (std::abs(a) + loose) &&
                                     std::abs(step(1)) <= loose * (std::abs(b) + loose));
  }
  fit.rss = rss;
  const double df = static_cast<double>(n - 2);
  const Eigen::Matrix2d jtj = jac.transpose() * jac;
  const double q = t_quantile(df, options.confidence);
  if (jtj.determinant() > 0.0) {
    const Eigen::Matrix2d cov = (rss / df) * jtj.inverse();
    fit.a = interval(a, std::sqrt(std::max(0.0, cov(0, 0))), q);
    fit.b = interval(b, std::sqrt(std::max(0.0, cov(1, 1))), q);
  } else {
    fit.a = {a, kInf, -kInf, kInf};
    fit.b = {b, kInf, -kInf, kInf};
  }
  return fit;
}

Eigen::MatrixXd expand_basis(const MatrixXd& x, bool cubes) {
  const Index p = x.cols();
  MatrixXd out(x.rows(), 2 * p + p * (p - 1) / 2 + (cubes ? p : 0));
  Index c = 0;
  for (Index j = 0; j < p; ++j) out.col(c++) = x.col(j);
  for (Index j = 0; j < p; ++j) out.col(c++) = x.col(j).array().square();
  for (Index j = 0; j < p; ++j)
    for (Index k = j + 1; k < p; ++k) out.col(c++) = x.col(j).cwiseProduct(x.col(k));
  if (cubes)
    for (Index j = 0; j < p; ++j) out.col(c++) = x.col(j).array().cube();
  return out;
}

std::vector<std::size_t> assign_folds(std::size_t n, std::size_t folds, std::uint64_t seed) {
  if (folds < 2 || folds > n)
    throw UsageError(fmt::format("cross-fitting: folds must be in [2, n = {}], got {}", n, folds));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(seed);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.uniform_int(0, i - 1)]);
  std::vector<std::size_t> fold_of(n);
  for (std::size_t i = 0; i < n; ++i) fold_of[order[i]] = i % folds;
  return fold_of;
}

Estimate dml_from_residuals(const VectorXd& u, const VectorXd& v, double confidence) {
  constexpr const char* kWhat = "double machine learning";
  check_confidence(kWhat, confidence);
  check_rows(kWhat, "v", v.size(), u.size());
  check_finite(kWhat, "u", u);
  check_finite(kWhat, "v", v);
  const double n = static_cast<double>(u.size());
  if (u.size() < 2) throw InputError(kWhat, 0, "residuals", "at least 2 observations");
  const double vv = v.squaredNorm();
  if (!(vv > 0.0))
    throw InputError(kWhat, 0, "treatment", "variation left after the controls (its residuals are all 0)");
  const double theta = u.dot(v) / vv;
  const VectorXd psi = (u - theta * v).cwiseProduct(v);
  const double mean_v2 = vv / n;
  const double se = std::sqrt(psi.squaredNorm() / n / (mean_v2 * mean_v2) / n);
  return interval(theta, se, z_quantile(confidence));
}

DmlEffect dml_partial_linear(const VectorXd& y, const VectorXd& d, const MatrixXd& x,
                             std::span<const std::size_t> fold_of, const DmlOptions& options) {
  constexpr const char* kWhat = "double machine learning";
  check_confidence(kWhat, options.confidence);
  if (!(options.ridge_lambda > 0.0) || !std::isfinite(options.ridge_lambda))
    throw UsageError(
        fmt::format("{}: ridge_lambda must be finite and > 0, got {}", kWhat, options.ridge_lambda));
  const Index n = y.size();
  check_rows(kWhat, "d", d.size(), n);
  check_rows(kWhat, "x", x.rows(), n);
  check_rows(kWhat, "folds", static_cast<Index>(fold_of.size()), n);
  check_finite(kWhat, "y", y);
  check_finite(kWhat, "d", d);
  check_finite(kWhat, "x", x);
  const std::size_t folds = fold_of.empty() ? 0 : *std::max_element(fold_of.begin(), fold_of.end()) + 1;
  if (folds < 2) throw UsageError(fmt::format("{}: at least 2 folds, got {}", kWhat, folds));
  std::vector<std::size_t> fold_size(folds, 0);
  for (std::size_t f : fold_of) ++fold_size[f];
  for (std::size_t f = 0; f < folds; ++f) {
    if (fold_size[f] == 0)
      throw UsageError(fmt::format("{}: fold {} of {} has no observations", kWhat, f, folds));
  }

  const MatrixXd basis = expand_basis(x, options.cubes);
  VectorXd u(n), v(n);
  for (std::size_t f = 0; f < folds; ++f) {
    const std::vector<Index> train = rows_where(fold_of, f, false), test = rows_where(fold_of, f, true);
    const MatrixXd basis_train = basis(train, Eigen::all);
    const MatrixXd basis_test = basis(test, Eigen::all);
    const RidgeFit l_hat = ridge(basis_train, y(train), options.ridge_lambda);
    const RidgeFit m_hat = ridge(basis_train, d(train), options.ridge_lambda);
    u(test) = y(test) - predict(l_hat, basis_test);
    v(test) = d(test) - predict(m_hat, basis_test);
  }
  DmlEffect out;
  out.observations = static_cast<std::size_t>(n);
  out.dml = dml_from_residuals(u, v, options.confidence);
  const OlsOptions ols_options{.intercept = true, .confidence = options.confidence};
  out.naive = ols(d, y, ols_options).robust(1);
  MatrixXd with_controls(n, 1 + x.cols());
  with_controls.col(0) = d;
  with_controls.rightCols(x.cols()) = x;
  out.naive_adjusted = ols(with_controls, y, ols_options).robust(1);
  return out;
}

DmlEffect dml_partial_linear(const VectorXd& y, const VectorXd& d, const MatrixXd& x,
                             const DmlOptions& options) {
  const std::vector<std::size_t> fold_of =
      assign_folds(static_cast<std::size_t>(y.size()), options.folds, options.seed);
  return dml_partial_linear(y, d, x, fold_of, options);
}

std::vector<DmlEffect> dml_partial_linear_each(const VectorXd& y, const MatrixXd& d, const MatrixXd& x,
                                               const DmlOptions& options) {
  const Index n = y.size();
  check_rows("double machine learning", "d", d.rows(), n);
  const std::vector<std::size_t> fold_of =
      assign_folds(static_cast<std::size_t>(n), options.folds, options.seed);
  std::vector<DmlEffect> out;
  for (Index j = 0; j < d.cols(); ++j) {
    MatrixXd controls(n, d.cols() - 1 + x.cols());
    Index c = 0;
    for (Index k = 0; k < d.cols(); ++k) {
      if (k != j) controls.col(c++) = d.col(k);
    }
    controls.rightCols(x.cols()) = x;
    out.push_back(dml_partial_linear(y, d.col(j), controls, fold_of, options));
  }
  return out;
}

}  // namespace tokenscope::analyze
