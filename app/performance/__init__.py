"""The Performance menu: a reply's Performance panel and "Benchmark this model".
"""
