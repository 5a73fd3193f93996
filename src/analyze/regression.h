// Regression models of the checklist (../shared/design/CHECKLIST.md): least
// squares for the latency model (item 1), a linear trend for latency growth
// within the steady phase (item 5), the exponential decay of prefix-cache
// hit probability with reuse distance (item 7), and partialling-out double
// machine learning for the attribution section.
//
// Every function takes its data as Eigen vectors and matrices (one row an
// observation) or spans, checks it, and throws InputError for data it cannot
// use (sizes that do not match, values that are not finite, too few
// observations, collinear columns) and UsageError for options out of range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Dense>

namespace tokenscope::analyze {

// An estimate with its standard error and confidence interval.
struct Estimate {
  double estimate = 0.0;
  double std_error = 0.0;
  double ci_low = 0.0;
  double ci_high = 0.0;
};

// ---------------------------------------------------------------------------
// Ordinary least squares.

struct OlsOptions {
  bool intercept = true;     // prepend a column of ones; its coefficient is the first
  double confidence = 0.95;  // of the intervals, in (0, 1)
};

// y = X beta + e fitted by least squares (column-pivoting Householder QR).
// With n observations and p coefficients (intercept included), df = n - p:
//  * classical covariance s^2 (X'X)^-1 with s^2 = RSS / df;
//  * HC1 (heteroskedasticity-consistent, MacKinnon & White 1985) covariance
//    n/df (X'X)^-1 (sum_i e_i^2 x_i x_i') (X'X)^-1;
//  * intervals beta_j -+ t_{df, (1+confidence)/2} se_j for both;
//  * R^2 = 1 - RSS/TSS, TSS centred with an intercept and uncentred
//    (sum y^2) without one, as R and statsmodels do; nan when TSS = 0.
struct OlsFit {
  Eigen::VectorXd coefficients;
  Eigen::VectorXd std_errors;         // classical
  Eigen::VectorXd robust_std_errors;  // HC1
  Eigen::VectorXd ci_low, ci_high;    // classical
  Eigen::VectorXd robust_ci_low, robust_ci_high;
  Eigen::VectorXd residuals;       // y - X beta
  double residual_variance = 0.0;  // s^2
  double r_squared = 0.0;
  std::size_t observations = 0;
  std::size_t df_residual = 0;

  // Coefficient j with its HC1 standard error and interval.
  Estimate robust(std::size_t j) const;
};

// Needs n > p and X of full column rank: a column that is (numerically, a
// pivot below 1e-10 of the largest) a linear combination of the others is an
// InputError that names it.
OlsFit ols(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, const OlsOptions& options = {});

// ---------------------------------------------------------------------------
// Ridge regression.

// The columns standardised, z_ij = (x_ij - mean_j) / sd_j (population sd;
// a constant column keeps sd 1 and gets coefficient 0), and
//   minimise sum_i (y_i - b0 - z_i' beta)^2 + lambda |beta|^2,
// the intercept not penalised: b0 = mean(y), beta = (Z'Z + lambda I)^-1 Z'(y -
// mean(y)). Coefficients are returned on the original scale of x: beta_j /
// sd_j, with intercept mean(y) - sum_j mean_j beta_j / sd_j.
struct RidgeFit {
  double intercept = 0.0;
  Eigen::VectorXd coefficients;  // one per column of x, original scale
  double lambda = 0.0;
};

// lambda > 0 (lambda = 0 is ols()). x may have no columns: the fit is then
// the mean of y.
RidgeFit ridge(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, double lambda);

// intercept + x * coefficients.
Eigen::VectorXd predict(const RidgeFit& fit, const Eigen::MatrixXd& x);

// ---------------------------------------------------------------------------
// Linear trend.

// y = intercept + slope t + e by least squares (scipy.stats.linregress):
// slope = S_ty / S_tt, se = sqrt(RSS / (n-2) / S_tt), p two-sided from
// t = slope / se with n-2 df, interval slope -+ t_{n-2, (1+confidence)/2} se.
// The errors are taken as independent: a series whose noise is correlated in
// time has a wider true interval.
struct LinearTrend {
  double intercept = 0.0;
  Estimate slope;
  double slope_p_value = 1.0;  // H0: slope = 0; 1 for a perfect flat fit, 0 for a perfect sloped one
  double r_squared = 0.0;      // nan when y is constant
  std::size_t observations = 0;
};

// Needs n >= 3 finite pairs and t not constant.
LinearTrend linear_trend(std::span<const double> t, std::span<const double> y, double confidence = 0.95);
// The trend over the index, t = 0, 1, ..., n-1.
LinearTrend linear_trend(std::span<const double> y, double confidence = 0.95);

// ---------------------------------------------------------------------------
// Exponential decay.

struct DecayFitOptions {
  std::size_t max_iterations = 200;
  // Converged when an accepted step changes each parameter by at most
  // tolerance * (|parameter| + tolerance).
  double tolerance = 1e-10;
  double confidence = 0.95;  // of the intervals, in (0, 1)
};

// y = a exp(-b x), least squares on the original scale. Start: ordinary
// least squares of ln y on x over the points with y > 0 (ln a, -b). Then
// Levenberg-Marquardt (Marquardt's diagonal scaling): solve
// (J'J + mu diag(J'J)) delta = J' r with J = [e^{-bx}, -a x e^{-bx}], accept a
// step that lowers the residual sum of squares (mu / 10) or reject it
// (mu * 10). Standard errors from s^2 (J'J)^-1 at the solution, s^2 = RSS/(n-2)
// (what scipy.optimize.curve_fit returns as pcov).
struct ExponentialDecayFit {
  Estimate a;  // intervals a -+ t_{n-2, (1+confidence)/2} se
  Estimate b;
  double start_a = 0.0;  // the log-linear start
  double start_b = 0.0;
  double rss = 0.0;
  std::size_t iterations = 0;
  // Also converged when no step lowers the RSS any more (rounding) and the
  // Gauss-Newton step is within sqrt(tolerance) of the parameters. false:
  // max_iterations ran out, or no step lowers the RSS far from a minimum; a
  // and b are then the best point seen.
  bool converged = false;
};

// Needs n >= 3 finite pairs, x not constant, and at least two points with
// y > 0 at distinct x for the start.
ExponentialDecayFit fit_exponential_decay(std::span<const double> x, std::span<const double> y,
                                          const DecayFitOptions& options = {});

// ---------------------------------------------------------------------------
// Double machine learning: the partially linear model
//   Y = theta D + g(X) + e,   D = m(X) + v,
// estimated by partialling out with cross-fitting (Chernozhukov, Chetverikov,
// Demirer, Duflo, Hansen, Newey and Robins, "Double/debiased machine learning
// for treatment and structural parameters", Econometrics Journal 21 (2018),
// section 4.1 and the DML2 estimator):
//  1. the observations are split into K folds;
//  2. for each fold, l(X) = E[Y|X] and m(X) = E[D|X] are learnt on the other
//     folds and predicted on it: u = Y - l_hat(X), v = D - m_hat(X);
//  3. theta = sum(u v) / sum(v v) over all observations, and with the score
//     psi = (u - theta v) v, se = sqrt(mean(psi^2) / mean(v^2)^2 / n); the
//     interval is theta -+ z_{(1+confidence)/2} se.
// The nuisance learners are ridge() on expand_basis(X).

struct DmlOptions {
  std::size_t folds = 5;      // K >= 2, at most n
  std::uint64_t seed = 1;     // of the fold assignment
  double ridge_lambda = 1.0;  // of the nuisance learners (standardised basis)
  bool cubes = false;         // add x_j^3 to the basis
  double confidence = 0.95;
};

struct DmlEffect {
  Estimate dml;             // cross-fitted partialling-out, normal interval
  Estimate naive;           // OLS of Y on D (with intercept), HC1, t interval
  Estimate naive_adjusted;  // OLS of Y on D and the columns of X, HC1, t interval
  std::size_t observations = 0;
};

// The basis the nuisance learners see: the columns x_j, their squares x_j^2,
// the pairwise products x_j x_k (j < k), and with cubes x_j^3, in that order:
// 2p + p(p-1)/2 columns (3p + p(p-1)/2 with cubes).
Eigen::MatrixXd expand_basis(const Eigen::MatrixXd& x, bool cubes = false);

// Fold of each of n observations: a seeded random permutation dealt out in
// turn, so fold sizes differ by at most one. Needs 2 <= folds <= n.
std::vector<std::size_t> assign_folds(std::size_t n, std::size_t folds, std::uint64_t seed);

// Step 3 from the residuals: theta = sum(u v) / sum(v^2) and its standard
// error from the score, as above.
Estimate dml_from_residuals(const Eigen::VectorXd& u, const Eigen::VectorXd& v, double confidence = 0.95);

// The effect of one treatment d on y, controls x (n x p, p may be 0).
DmlEffect dml_partial_linear(const Eigen::VectorXd& y, const Eigen::VectorXd& d, const Eigen::MatrixXd& x,
                             const DmlOptions& options = {});
// The same with the fold of each observation given (values in [0, K), every
// fold used); options.folds and options.seed are not used.
DmlEffect dml_partial_linear(const Eigen::VectorXd& y, const Eigen::VectorXd& d, const Eigen::MatrixXd& x,
                             std::span<const std::size_t> fold_of, const DmlOptions& options = {});

// Several treatments (the columns of d): each one's effect in turn, with the
// other treatments among the controls (before x), on the same folds.
std::vector<DmlEffect> dml_partial_linear_each(const Eigen::VectorXd& y, const Eigen::MatrixXd& d,
                                               const Eigen::MatrixXd& x, const DmlOptions& options = {});

}  // namespace tokenscope::analyze
