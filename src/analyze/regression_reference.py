#!/ usr / bin / env python3
"""Reference values for regression_test.cpp (not run by the tests).

Each value that regression_test.cpp hard-codes is printed here, computed with
numpy 1.24 / scipy 1.10 in Debian's python3:

    /usr/bin/python3 src/analyze/regression_reference.py

Least squares from numpy.linalg.lstsq, its covariances written out from their
definitions (classical s^2 (X'X)^-1 and HC1); the linear trend from
scipy.stats.linregress; the exponential decay from scipy.optimize.curve_fit
(Levenberg-Marquardt, MINPACK) with the analytic Jacobian and tight
tolerances; ridge and double machine learning from their closed forms as
regression.h states them.

Student t quantiles come from mpmath (30 digits) by inverting the t CDF:
scipy 1.10's stats.t.ppf is off in the tenth digit (t.ppf(0.975, 7) =
2.3646242510102993, the true value 2.3646242515927853...).
"""
import mpmath
import numpy as np
from scipy import optimize, stats

mpmath.mp.dps = 30


def t_ppf(p, df):
    """The p-quantile (p > 0.5) of Student's t with df degrees of freedom:
    P(T > x) = I_{df/(df+x^2)}(df/2, 1/2) / 2 = 1 - p, solved for x."""
    df = mpmath.mpf(df)
    tail = lambda x: mpmath.betainc(df / 2, mpmath.mpf(1) / 2, 0, df / (df + x * x), regularized=True) / 2
    guess = stats.t.ppf(p, float(df))
    return float(mpmath.findroot(lambda x: tail(x) - (1 - mpmath.mpf(p)), guess))

np.set_printoptions(precision=17, linewidth=120)

#A small dataset : two regressors and y.
X1 = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10.0])
X2 = np.array([2.0, 1.5, 3.2, 4.1, 3.3, 5.8, 6.1, 5.5, 8.0, 7.7])
Y = np.array([3.1, 4.0, 6.2, 7.9, 8.1, 11.3, 12.0, 12.4, 15.9, 16.1])


def ols(X, y, intercept=True, confidence=0.95):
    if intercept:
        X = np.column_stack([np.ones(len(y)), X])
    n, p = X.shape
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    e = y - X @ beta
    df = n - p
    s2 = e @ e / df
    inv = np.linalg.inv(X.T @ X)
    se = np.sqrt(np.diag(s2 * inv))
    hc1 = n / df * inv @ (X.T * e**2) @ X @ inv
    rse = np.sqrt(np.diag(hc1))
    q = t_ppf(0.5 + confidence / 2, df)
    tss = ((y - y.mean()) ** 2).sum() if intercept else (y**2).sum()
    return dict(beta=beta, se=se, robust_se=rse, ci_low=beta - q * se, ci_high=beta + q * se,
                robust_ci_low=beta - q * rse, r2=1 - e @ e / tss, s2=s2)


def ridge(X, y, lam):
    X = np.atleast_2d(X.T).T if X.ndim == 1 else X
    mean = X.mean(axis=0)
    sd = X.std(axis=0)  # ddof=0
    Z = (X - mean) / sd
    beta = np.linalg.solve(Z.T @ Z + lam * np.eye(X.shape[1]), Z.T @ (y - y.mean()))
    coef = beta / sd
    return y.mean() - mean @ coef, coef


def basis(X):
    p = X.shape[1]
    cols = [X[:, j] for j in range(p)] + [X[:, j] ** 2 for j in range(p)]
    cols += [X[:, j] * X[:, k] for j in range(p) for k in range(j + 1, p)]
    return np.column_stack(cols)


def dml(y, d, X, folds, lam=1.0, confidence=0.95):
    B = basis(X)
    u = np.empty_like(y)
    v = np.empty_like(d)
    for f in sorted(set(folds)):
        test = folds == f
        b0, b = ridge(B[~test], y[~test], lam)
        u[test] = y[test] - (b0 + B[test] @ b)
        b0, b = ridge(B[~test], d[~test], lam)
        v[test] = d[test] - (b0 + B[test] @ b)
    return from_residuals(u, v, confidence)


def from_residuals(u, v, confidence=0.95):
    n = len(u)
    theta = (u @ v) / (v @ v)
    psi = (u - theta * v) * v
    se = np.sqrt(np.mean(psi**2) / np.mean(v**2) ** 2 / n)
    z = stats.norm.ppf(0.5 + confidence / 2)
    return theta, se, theta - z * se, theta + z * se


def show(name, value):
    print(name, "=", repr(value))


if __name__ == "__main__":
    X = np.column_stack([X1, X2])
    fit = ols(X, Y)
    for k, v in fit.items():
        show("ols(x1, x2) " + k, v)
    fit = ols(X, Y, intercept=False)
    for k in ("beta", "se", "robust_se", "r2"):
        show("ols(x1, x2, no intercept) " + k, fit[k])

    show("ridge(x1, x2, lambda 2.5) (intercept, coef)", ridge(X, Y, 2.5))
    show("ridge(x1, lambda 0.1) (intercept, coef)", ridge(X1[:, None], Y, 0.1))

    TREND = np.array([10.2, 10.9, 11.1, 12.3, 12.0, 13.4, 13.1, 14.5, 14.2, 15.8, 15.5, 16.9])
    r = stats.linregress(np.arange(len(TREND)), TREND)
    show("linregress(0..11, TREND)", r)
    show("  r^2", r.rvalue**2)
    q = t_ppf(0.975, len(TREND) - 2)
    show("  slope ci", (r.slope - q * r.stderr, r.slope + q * r.stderr))
    T2 = np.array([0.5, 1.0, 2.5, 3.0, 4.5, 6.0, 7.5, 8.0])
    Y2 = np.array([5.0, 4.6, 4.9, 4.4, 4.7, 4.1, 4.3, 3.9])
    r = stats.linregress(T2, Y2)
    show("linregress(T2, Y2)", r)

    DX = np.array([0, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 120.0])
    DY = np.array([0.9, 0.7428, 0.5978, 0.4761, 0.3953, 0.2512, 0.1829, 0.1486, 0.0718, 0.0243, 0.0263, 0.0145])
    slope, icept = np.polyfit(DX, np.log(DY), 1)
    show("log-linear start (a, b)", (np.exp(icept), -slope))
    model = lambda x, a, b: a * np.exp(-b * x)
    jac = lambda x, a, b: np.column_stack([np.exp(-b * x), -a * x * np.exp(-b * x)])
    popt, pcov = optimize.curve_fit(model, DX, DY, p0=(np.exp(icept), -slope), jac=jac,
                                    xtol=1e-15, ftol=1e-15, gtol=1e-15)
    show("curve_fit (a, b)", popt)
    show("curve_fit se", np.sqrt(np.diag(pcov)))
    show("curve_fit rss", ((DY - model(DX, *popt)) ** 2).sum())
    show("t_ppf(0.975, 10)", t_ppf(0.975, 10))

    U = np.array([1.0, -0.5, 2.0, 0.3, -1.2])
    V = np.array([0.8, -0.3, 1.1, 0.2, -0.9])
    show("dml_from_residuals(U, V)", from_residuals(U, V))

    SX = np.array([[0.034, 1.36], [1.225, -0.51], [-0.298, -0.527], [0.57, -0.056], [0.747, -1.847],
                   [1.567, -0.096], [0.68, -0.137], [-0.379, 0.463], [0.825, -0.203], [-0.153, 0.686],
                   [-0.87, -1.514], [0.395, -0.671]])
    SD = np.array([-0.197, 0.555, -0.331, -0.196, 1.141, 1.119, 0.932, -0.296, 0.222, 0.274, 0.666, 0.307])
    SY = np.array([0.18, 2.399, -0.661, 0.084, 2.319, 2.341, 1.751, -1.064, 0.706, -0.372, -2.194, 0.771])
    FOLDS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    show("dml(SY, SD, SX, FOLDS, lambda 1)", dml(SY, SD, SX, FOLDS))
    fit = ols(SD, SY)
    show("naive (beta, robust se, robust ci low)", (fit["beta"][1], fit["robust_se"][1], fit["robust_ci_low"][1]))
    fit = ols(np.column_stack([SD, SX]), SY)
    show("naive adjusted (beta, robust se)", (fit["beta"][1], fit["robust_se"][1]))
